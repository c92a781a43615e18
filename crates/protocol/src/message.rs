//! `AgentMessage`: the message model every engine sees (contract §2).
//!
//! Messages are JSON objects discriminated by `role`. The three core roles (`user`,
//! `assistant`, `toolResult`) and the coding-agent custom roles (`bashExecution`, `custom`,
//! `branchSummary`, `compactionSummary`) are typed; any other role is kept verbatim as
//! [`AgentMessage::Other`]. Every typed struct carries an `extra` map with the fields it does not
//! name (`__openclaw`, `responseId`, ...), so `deserialize → serialize` is lossless.
//!
//! Fields that OpenClaw treats as optional are `Option`s and are skipped when absent: a message
//! that arrived without `isError` must leave without it.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Number, Value};

use crate::JsonMap;

/// Message content: a plain string or a list of blocks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(untagged)]
pub enum Content {
    /// `content: "hello"`.
    Text(String),
    /// `content: [{type: "text", ...}, ...]`.
    Blocks(Vec<ContentBlock>),
}

impl Default for Content {
    fn default() -> Self {
        Content::Blocks(Vec::new())
    }
}

impl Content {
    /// The blocks of this content; a plain string is one text block.
    pub fn blocks(&self) -> Vec<ContentBlock> {
        match self {
            Content::Text(t) => vec![ContentBlock::Text(TextContent::new(t.clone()))],
            Content::Blocks(b) => b.clone(),
        }
    }

    /// Iterates the blocks without cloning; a plain string yields nothing here (see [`Self::as_text`]).
    pub fn block_slice(&self) -> &[ContentBlock] {
        match self {
            Content::Text(_) => &[],
            Content::Blocks(b) => b,
        }
    }

    /// The plain-string form, when the content is one.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Content::Text(t) => Some(t),
            Content::Blocks(_) => None,
        }
    }
}

/// `{type: "text", text}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TextContent {
    /// The text.
    pub text: String,
    /// Fields this type does not name (e.g. `textSignature`).
    #[serde(flatten)]
    pub extra: JsonMap,
}

impl TextContent {
    /// A text block with no extra fields.
    pub fn new(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            extra: JsonMap::new(),
        }
    }
}

/// `{type: "thinking", thinking, thinkingSignature?}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ThinkingContent {
    /// The reasoning text.
    pub thinking: String,
    /// Provider signature, when the provider gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking_signature: Option<String>,
    /// Fields this type does not name.
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// `{type: "image", data: base64, mimeType}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ImageContent {
    /// Base64 image bytes.
    pub data: String,
    /// e.g. `image/png`.
    pub mime_type: String,
    /// Fields this type does not name.
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// `{type: "toolCall", id, name, arguments, thoughtSignature?}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ToolCall {
    /// The call id the matching `toolResult.toolCallId` refers to.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments object (kept as JSON).
    #[serde(default)]
    pub arguments: Value,
    /// Provider signature, when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thought_signature: Option<String>,
    /// Fields this type does not name.
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// One content block. Unknown block types are kept verbatim.
#[derive(Clone, Debug, PartialEq)]
pub enum ContentBlock {
    /// `type: "text"`.
    Text(TextContent),
    /// `type: "thinking"`.
    Thinking(ThinkingContent),
    /// `type: "image"`.
    Image(ImageContent),
    /// `type: "toolCall"`.
    ToolCall(ToolCall),
    /// Any other block, as received (including its `type`).
    Unknown(JsonMap),
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text(TextContent::new(text))
    }
}

/// `{role: tag, ...fields}` written straight to the serializer (no intermediate `Value`): the
/// tag entry first, then the record's own fields in declaration order, then its `extra` map,
/// exactly the bytes [`tagged`] produces. Serialization sits on every plugin call and every
/// stored message, so it must not build a JSON tree just to prepend one key.
#[derive(Serialize)]
struct RoleTagged<'a, T> {
    role: &'a str,
    #[serde(flatten)]
    body: &'a T,
}

/// Same as [`RoleTagged`] for content blocks (`type`).
#[derive(Serialize)]
struct TypeTagged<'a, T> {
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(flatten)]
    body: &'a T,
}

/// Serializes `value` with its tag in front. When the record's `extra` map itself carries the
/// tag key (only possible for records built in code, never for parsed ones), the slow path
/// drops it so the output never has the key twice.
fn serialize_tagged<S: Serializer, T: Serialize>(
    s: S,
    tag_key: &'static str,
    tag: &str,
    value: &T,
    extra: &JsonMap,
) -> Result<S::Ok, S::Error> {
    use serde::ser::Error;
    if extra.contains_key(tag_key) {
        return tagged(tag_key, tag, value)
            .map_err(S::Error::custom)?
            .serialize(s);
    }
    if tag_key == "role" {
        RoleTagged {
            role: tag,
            body: value,
        }
        .serialize(s)
    } else {
        TypeTagged {
            kind: tag,
            body: value,
        }
        .serialize(s)
    }
}

fn tagged<T: Serialize>(tag_key: &str, tag: &str, value: &T) -> Result<JsonMap, serde_json::Error> {
    match serde_json::to_value(value)? {
        Value::Object(fields) => {
            let mut out = JsonMap::with_capacity(fields.len() + 1);
            out.insert(tag_key.to_owned(), Value::String(tag.to_owned()));
            for (k, v) in fields {
                if k != tag_key {
                    out.insert(k, v);
                }
            }
            Ok(out)
        }
        _ => Err(serde_json::Error::custom(
            "record did not serialize to an object",
        )),
    }
}

impl Serialize for ContentBlock {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ContentBlock::Text(b) => serialize_tagged(s, "type", "text", b, &b.extra),
            ContentBlock::Thinking(b) => serialize_tagged(s, "type", "thinking", b, &b.extra),
            ContentBlock::Image(b) => serialize_tagged(s, "type", "image", b, &b.extra),
            ContentBlock::ToolCall(b) => serialize_tagged(s, "type", "toolCall", b, &b.extra),
            ContentBlock::Unknown(m) => m.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for ContentBlock {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut map = JsonMap::deserialize(d)?;
        let kind = map.get("type").and_then(Value::as_str).map(str::to_owned);
        let parse = |map: JsonMap| Value::Object(map);
        Ok(match kind.as_deref() {
            Some("text") => {
                map.remove("type");
                ContentBlock::Text(serde_json::from_value(parse(map)).map_err(D::Error::custom)?)
            }
            Some("thinking") => {
                map.remove("type");
                ContentBlock::Thinking(
                    serde_json::from_value(parse(map)).map_err(D::Error::custom)?,
                )
            }
            Some("image") => {
                map.remove("type");
                ContentBlock::Image(serde_json::from_value(parse(map)).map_err(D::Error::custom)?)
            }
            Some("toolCall") => {
                map.remove("type");
                ContentBlock::ToolCall(
                    serde_json::from_value(parse(map)).map_err(D::Error::custom)?,
                )
            }
            _ => ContentBlock::Unknown(map),
        })
    }
}

/// Token usage reported by the provider on an assistant message.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// Input tokens.
    #[serde(default)]
    pub input: u64,
    /// Output tokens.
    #[serde(default)]
    pub output: u64,
    /// Prompt-cache read tokens.
    #[serde(default)]
    pub cache_read: u64,
    /// Prompt-cache write tokens.
    #[serde(default)]
    pub cache_write: u64,
    /// Total tokens (0 when the provider did not say).
    #[serde(default)]
    pub total_tokens: u64,
    /// Cost breakdown, kept as received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<Value>,
    /// Fields this type does not name.
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// `role: "user"`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UserMessage {
    /// Text or text/image blocks.
    pub content: Content,
    /// Epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<Number>,
    /// Fields this type does not name (e.g. `__openclaw`).
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// `role: "assistant"`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct AssistantMessage {
    /// Text, thinking and tool-call blocks.
    pub content: Content,
    /// Provider API family, e.g. `openai-completions`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api: Option<String>,
    /// Provider id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Model id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Token usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// `stop | length | toolUse | error | aborted` (kept as a string so unknown values survive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// Provider error text when `stopReason` is `error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    /// Epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<Number>,
    /// Fields this type does not name (`responseId`, `diagnostics`, ...).
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// `role: "toolResult"`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ToolResultMessage {
    /// The id of the `toolCall` block this answers.
    pub tool_call_id: String,
    /// Tool name.
    #[serde(default)]
    pub tool_name: String,
    /// Text/image blocks.
    pub content: Content,
    /// UI-only details, never sent to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    /// Whether the tool failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_error: Option<bool>,
    /// Epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<Number>,
    /// Fields this type does not name.
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// `role: "bashExecution"` (coding-agent custom role).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct BashExecutionMessage {
    /// The command line.
    #[serde(default)]
    pub command: String,
    /// Its output.
    #[serde(default)]
    pub output: String,
    /// Exit code, when it finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    /// Epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<Number>,
    /// Fields this type does not name (`cancelled`, `truncated`, ...).
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// `role: "custom"` (extension-injected message).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct CustomMessage {
    /// The extension's type tag.
    #[serde(default)]
    pub custom_type: String,
    /// Content shown to the model.
    #[serde(default)]
    pub content: Content,
    /// Epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<Number>,
    /// Fields this type does not name (`display`, `details`, ...).
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// `role: "branchSummary"` or `role: "compactionSummary"`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct SummaryMessage {
    /// The summary text.
    #[serde(default)]
    pub summary: String,
    /// Epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<Number>,
    /// Fields this type does not name (`fromId`, `tokensBefore`, ...).
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// One message of the conversation, as engines see it.
#[derive(Clone, Debug, PartialEq)]
pub enum AgentMessage {
    /// `role: "user"`.
    User(UserMessage),
    /// `role: "assistant"`.
    Assistant(AssistantMessage),
    /// `role: "toolResult"`.
    ToolResult(ToolResultMessage),
    /// `role: "bashExecution"`.
    BashExecution(BashExecutionMessage),
    /// `role: "custom"`.
    Custom(CustomMessage),
    /// `role: "branchSummary"`.
    BranchSummary(SummaryMessage),
    /// `role: "compactionSummary"`.
    CompactionSummary(SummaryMessage),
    /// Any other role (e.g. `system` from a plugin), kept verbatim including `role`.
    Other(JsonMap),
}

/// Prefix of the user message that carries a compaction summary to the model (§7.4).
pub const COMPACTION_SUMMARY_PREFIX: &str =
    "The conversation history before this point was compacted into the following summary:\n\n<summary>\n";
/// Suffix of the compaction-summary user message.
pub const COMPACTION_SUMMARY_SUFFIX: &str = "\n</summary>";
/// Prefix of the user message that carries a branch summary to the model (§7.4).
pub const BRANCH_SUMMARY_PREFIX: &str =
    "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n";
/// Suffix of the branch-summary user message.
pub const BRANCH_SUMMARY_SUFFIX: &str = "</summary>";

impl AgentMessage {
    /// The `role` string.
    pub fn role(&self) -> &str {
        match self {
            AgentMessage::User(_) => "user",
            AgentMessage::Assistant(_) => "assistant",
            AgentMessage::ToolResult(_) => "toolResult",
            AgentMessage::BashExecution(_) => "bashExecution",
            AgentMessage::Custom(_) => "custom",
            AgentMessage::BranchSummary(_) => "branchSummary",
            AgentMessage::CompactionSummary(_) => "compactionSummary",
            AgentMessage::Other(m) => m.get("role").and_then(Value::as_str).unwrap_or(""),
        }
    }

    /// A user message with string content.
    pub fn user(text: impl Into<String>) -> Self {
        AgentMessage::User(UserMessage {
            content: Content::Text(text.into()),
            ..Default::default()
        })
    }

    /// An assistant message with one text block.
    pub fn assistant(text: impl Into<String>) -> Self {
        AgentMessage::Assistant(AssistantMessage {
            content: Content::Blocks(vec![ContentBlock::text(text)]),
            stop_reason: Some("stop".into()),
            ..Default::default()
        })
    }

    /// An assistant message that calls one tool.
    pub fn tool_call(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        AgentMessage::Assistant(AssistantMessage {
            content: Content::Blocks(vec![ContentBlock::ToolCall(ToolCall {
                id: id.into(),
                name: name.into(),
                arguments,
                thought_signature: None,
                extra: JsonMap::new(),
            })]),
            stop_reason: Some("toolUse".into()),
            ..Default::default()
        })
    }

    /// A tool result with one text block.
    pub fn tool_result(
        call_id: impl Into<String>,
        name: impl Into<String>,
        text: impl Into<String>,
    ) -> Self {
        AgentMessage::ToolResult(ToolResultMessage {
            tool_call_id: call_id.into(),
            tool_name: name.into(),
            content: Content::Blocks(vec![ContentBlock::text(text)]),
            is_error: Some(false),
            ..Default::default()
        })
    }

    /// The `timestamp` field in epoch ms, when present and numeric.
    pub fn timestamp_ms(&self) -> Option<i64> {
        let n = match self {
            AgentMessage::User(m) => m.timestamp.as_ref(),
            AgentMessage::Assistant(m) => m.timestamp.as_ref(),
            AgentMessage::ToolResult(m) => m.timestamp.as_ref(),
            AgentMessage::BashExecution(m) => m.timestamp.as_ref(),
            AgentMessage::Custom(m) => m.timestamp.as_ref(),
            AgentMessage::BranchSummary(m) | AgentMessage::CompactionSummary(m) => {
                m.timestamp.as_ref()
            }
            AgentMessage::Other(m) => {
                return m
                    .get("timestamp")
                    .and_then(|v| v.as_i64().or_else(|| v.as_f64().map(|f| f as i64)))
            }
        }?;
        n.as_i64().or_else(|| n.as_f64().map(|f| f as i64))
    }

    /// Sets the `timestamp` (epoch ms).
    pub fn with_timestamp(mut self, ms: i64) -> Self {
        let n = Some(Number::from(ms));
        match &mut self {
            AgentMessage::User(m) => m.timestamp = n,
            AgentMessage::Assistant(m) => m.timestamp = n,
            AgentMessage::ToolResult(m) => m.timestamp = n,
            AgentMessage::BashExecution(m) => m.timestamp = n,
            AgentMessage::Custom(m) => m.timestamp = n,
            AgentMessage::BranchSummary(m) | AgentMessage::CompactionSummary(m) => m.timestamp = n,
            AgentMessage::Other(m) => {
                m.insert("timestamp".into(), Value::from(ms));
            }
        }
        self
    }

    /// Tool calls made by this message (assistant messages only).
    pub fn tool_calls(&self) -> impl Iterator<Item = &ToolCall> {
        let blocks: &[ContentBlock] = match self {
            AgentMessage::Assistant(m) => m.content.block_slice(),
            _ => &[],
        };
        blocks.iter().filter_map(|b| match b {
            ContentBlock::ToolCall(c) => Some(c),
            _ => None,
        })
    }

    /// The `toolCallId` this message answers (tool results only).
    pub fn tool_result_id(&self) -> Option<&str> {
        match self {
            AgentMessage::ToolResult(m) => Some(&m.tool_call_id),
            _ => None,
        }
    }

    /// The model-visible text of this message, flattened: text blocks, thinking, tool calls as
    /// `name(arguments)`, bash command and output, summaries. Images contribute nothing here.
    pub fn plain_text(&self) -> String {
        fn push_blocks(out: &mut String, content: &Content) {
            match content {
                Content::Text(t) => push(out, t),
                Content::Blocks(blocks) => {
                    for b in blocks {
                        match b {
                            ContentBlock::Text(t) => push(out, &t.text),
                            ContentBlock::Thinking(t) => push(out, &t.thinking),
                            ContentBlock::ToolCall(c) => {
                                push(out, &format!("{}({})", c.name, c.arguments));
                            }
                            ContentBlock::Image(_) => {}
                            ContentBlock::Unknown(m) => {
                                if let Some(t) = m.get("text").and_then(Value::as_str) {
                                    push(out, t)
                                }
                            }
                        }
                    }
                }
            }
        }
        fn push(out: &mut String, s: &str) {
            if !out.is_empty() && !s.is_empty() {
                out.push('\n');
            }
            out.push_str(s);
        }
        let mut out = String::new();
        match self {
            AgentMessage::User(m) => push_blocks(&mut out, &m.content),
            AgentMessage::Assistant(m) => push_blocks(&mut out, &m.content),
            AgentMessage::ToolResult(m) => push_blocks(&mut out, &m.content),
            AgentMessage::BashExecution(m) => {
                push(&mut out, &m.command);
                push(&mut out, &m.output);
            }
            AgentMessage::Custom(m) => push_blocks(&mut out, &m.content),
            AgentMessage::BranchSummary(m) | AgentMessage::CompactionSummary(m) => {
                push(&mut out, &m.summary)
            }
            AgentMessage::Other(m) => {
                if let Some(c) = m.get("content") {
                    if let Ok(c) = serde_json::from_value::<Content>(c.clone()) {
                        push_blocks(&mut out, &c);
                    }
                }
            }
        }
        out
    }

    /// Number of image blocks (costed separately by token estimators).
    pub fn image_count(&self) -> usize {
        let content = match self {
            AgentMessage::User(m) => &m.content,
            AgentMessage::Assistant(m) => &m.content,
            AgentMessage::ToolResult(m) => &m.content,
            AgentMessage::Custom(m) => &m.content,
            _ => return 0,
        };
        content
            .block_slice()
            .iter()
            .filter(|b| matches!(b, ContentBlock::Image(_)))
            .count()
    }
}

impl Serialize for AgentMessage {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            AgentMessage::User(m) => serialize_tagged(s, "role", "user", m, &m.extra),
            AgentMessage::Assistant(m) => serialize_tagged(s, "role", "assistant", m, &m.extra),
            AgentMessage::ToolResult(m) => serialize_tagged(s, "role", "toolResult", m, &m.extra),
            AgentMessage::BashExecution(m) => {
                serialize_tagged(s, "role", "bashExecution", m, &m.extra)
            }
            AgentMessage::Custom(m) => serialize_tagged(s, "role", "custom", m, &m.extra),
            AgentMessage::BranchSummary(m) => {
                serialize_tagged(s, "role", "branchSummary", m, &m.extra)
            }
            AgentMessage::CompactionSummary(m) => {
                serialize_tagged(s, "role", "compactionSummary", m, &m.extra)
            }
            AgentMessage::Other(m) => m.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for AgentMessage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map = JsonMap::deserialize(d)?;
        AgentMessage::from_map(map).map_err(D::Error::custom)
    }
}

impl AgentMessage {
    /// Builds a message from a JSON object, dispatching on `role`. A message with a known role
    /// whose fields do not fit that role's shape is an error naming the role.
    pub fn from_map(map: JsonMap) -> Result<Self, String> {
        let role = match map.get("role") {
            Some(Value::String(r)) => r.clone(),
            Some(other) => return Err(format!("message `role` must be a string, got {other}")),
            None => return Err("message has no `role`".into()),
        };
        fn typed<T: serde::de::DeserializeOwned>(
            role: &str,
            mut map: JsonMap,
        ) -> Result<T, String> {
            map.remove("role");
            serde_json::from_value(Value::Object(map))
                .map_err(|e| format!("invalid `{role}` message: {e}"))
        }
        Ok(match role.as_str() {
            "user" => AgentMessage::User(typed(&role, map)?),
            "assistant" => AgentMessage::Assistant(typed(&role, map)?),
            "toolResult" => AgentMessage::ToolResult(typed(&role, map)?),
            "bashExecution" => AgentMessage::BashExecution(typed(&role, map)?),
            "custom" => AgentMessage::Custom(typed(&role, map)?),
            "branchSummary" => AgentMessage::BranchSummary(typed(&role, map)?),
            "compactionSummary" => AgentMessage::CompactionSummary(typed(&role, map)?),
            _ => {
                // Unknown role: kept verbatim, `role` included.
                AgentMessage::Other(map)
            }
        })
    }
}

#[cfg(test)]
mod serialize_tests {
    use super::*;
    use serde_json::json;

    /// The reference encoding: through a `Value` tree, as `tagged` builds it.
    fn via_tree(m: &AgentMessage) -> String {
        fn block(b: &ContentBlock) -> Value {
            let map = match b {
                ContentBlock::Text(b) => tagged("type", "text", b),
                ContentBlock::Thinking(b) => tagged("type", "thinking", b),
                ContentBlock::Image(b) => tagged("type", "image", b),
                ContentBlock::ToolCall(b) => tagged("type", "toolCall", b),
                ContentBlock::Unknown(m) => Ok(m.clone()),
            };
            Value::Object(map.expect("block encodes"))
        }
        let map = match m {
            AgentMessage::User(m) => tagged("role", "user", m),
            AgentMessage::Assistant(m) => tagged("role", "assistant", m),
            AgentMessage::ToolResult(m) => tagged("role", "toolResult", m),
            AgentMessage::BashExecution(m) => tagged("role", "bashExecution", m),
            AgentMessage::Custom(m) => tagged("role", "custom", m),
            AgentMessage::BranchSummary(m) => tagged("role", "branchSummary", m),
            AgentMessage::CompactionSummary(m) => tagged("role", "compactionSummary", m),
            AgentMessage::Other(m) => Ok(m.clone()),
        };
        let mut map = map.expect("message encodes");
        // `tagged` encodes nested blocks with the live impl; re-encode them the reference way.
        if let Some(Value::Array(blocks)) = map.get("content").cloned() {
            let typed: Vec<ContentBlock> =
                serde_json::from_value(Value::Array(blocks)).expect("blocks parse");
            map.insert(
                "content".into(),
                Value::Array(typed.iter().map(block).collect()),
            );
        }
        serde_json::to_string(&map).expect("map encodes")
    }

    #[test]
    fn direct_encoding_matches_the_tree_encoding_byte_for_byte() {
        let wire = json!([
            {"role": "user", "content": "hi", "timestamp": 1, "__openclaw": {"k": 1}},
            {"role": "user", "content": [{"type": "text", "text": "a", "textSignature": "s"},
                                         {"type": "image", "data": "AA==", "mimeType": "image/png", "x": true}]},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "thinkingSignature": "sig"},
                                              {"type": "toolCall", "id": "c1", "name": "read", "arguments": {"p": 1.5}, "z": null},
                                              {"type": "mystery", "payload": [1, 2]}],
             "api": "openai-completions", "provider": "p", "model": "m",
             "usage": {"input": 1, "output": 2, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 3, "cost": {"total": 0.1}, "extraUsage": 9},
             "stopReason": "toolUse", "timestamp": 2.5, "responseId": "r"},
            {"role": "toolResult", "toolCallId": "c1", "toolName": "read", "content": [{"type": "text", "text": "ok"}],
             "details": {"d": 1}, "isError": false, "timestamp": 3},
            {"role": "bashExecution", "command": "ls", "output": "x", "exitCode": 0, "cancelled": false},
            {"role": "custom", "customType": "note", "content": "c", "display": true},
            {"role": "branchSummary", "summary": "b", "fromId": "e1"},
            {"role": "compactionSummary", "summary": "s", "tokensBefore": 10},
            {"role": "system", "content": "kept verbatim"}
        ]);
        let messages: Vec<AgentMessage> = serde_json::from_value(wire).expect("fixtures parse");
        for m in &messages {
            let direct = serde_json::to_string(m).expect("encodes");
            assert_eq!(
                direct,
                via_tree(m),
                "the direct encoding of a `{}` message differs from the tree encoding",
                m.role()
            );
            let value = serde_json::to_value(m).expect("encodes to a value");
            assert_eq!(
                serde_json::to_string(&value).expect("value encodes"),
                direct,
                "to_value and to_string disagree for `{}`",
                m.role()
            );
        }
    }

    #[test]
    fn a_tag_key_in_extra_is_never_written_twice() {
        let mut extra = JsonMap::new();
        extra.insert("role".into(), json!("impostor"));
        extra.insert("k".into(), json!(1));
        let m = AgentMessage::User(UserMessage {
            content: Content::Text("hi".into()),
            timestamp: None,
            extra,
        });
        assert_eq!(
            serde_json::to_string(&m).expect("encodes"),
            r#"{"role":"user","content":"hi","k":1}"#
        );
    }
}
