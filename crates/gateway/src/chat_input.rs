//! What a chat completion request asks of a turn: read once, checked field by field, so every
//! refusal names the field at fault and comes before anything is stored.
//!
//! - The **input**: the last message is the user's (its text is the prompt, its `data:` images
//!   go with it) or a run of `tool` messages answering the client tool calls the session's last
//!   turn ended on (they continue that turn). Earlier messages are the client's copy of the
//!   conversation and are not replayed (the stored session is the conversation).
//! - **System messages**: every `system`/`developer` message's text, in order, is appended to
//!   the configured system prompt for this turn (the agent's own instructions stay; the
//!   client's apply on top). They are sent on every request and so are never stored.
//! - **Client tools** (`tools`, `tool_choice`): offered to the model next to the engine's own
//!   tools, whose names they may not reuse.
//! - **Sampling**: `temperature`, `top_p`, `max_completion_tokens` (or `max_tokens`; at most
//!   the model's configured `maxTokens`, which the context budget leaves room for: the
//!   handler refuses more, as OpenAI does), `stop`,
//!   `seed`, `presence_penalty`, `frequency_penalty` go to the provider; `n` above 1 is
//!   refused (one choice per turn).
//! - **Images**: `image_url` parts with a `data:image/...;base64,` URL are stored with the
//!   prompt and sent to providers that take images; a remote URL is refused (the gateway does
//!   not fetch), as is any other part type (`input_audio`, `file`).

use clawctx_model::{Sampling, ToolChoice, ToolSpec};
use clawctx_protocol::{Content, ContentBlock, ImageContent, JsonMap, ToolResultMessage};
use clawctx_runtime::ModelOptions;
use serde_json::Value;

use crate::api_error::ApiError;
use crate::openai_wire::ChatCompletionRequest;

/// Images one prompt may carry (OpenClaw's `maxImageParts`).
const MAX_IMAGE_PARTS: usize = 8;

/// Roles a request's messages may have.
const ROLES: [&str; 6] = [
    "system",
    "developer",
    "user",
    "assistant",
    "tool",
    "function",
];

/// A request, read.
#[derive(Debug, Default)]
pub(crate) struct ChatInput {
    /// The user's text (empty for a continuation).
    pub prompt: String,
    /// Images sent with it.
    pub images: Vec<ImageContent>,
    /// Tool results continuing the last turn, with the index of their message.
    pub tool_results: Vec<(usize, ToolResultMessage)>,
    /// The client's system messages.
    pub system_extra: Option<String>,
    /// The client's tools.
    pub tools: Vec<ToolSpec>,
    /// Sampling and tool choice.
    pub options: ModelOptions,
}

/// Reads `request`; `own_tools` are the names of the tools the gateway runs itself.
pub(crate) fn read(
    request: &ChatCompletionRequest,
    own_tools: &[String],
) -> Result<ChatInput, ApiError> {
    let mut input = ChatInput {
        tools: tools(request, own_tools)?,
        ..Default::default()
    };
    input.options = options(request, &input.tools)?;
    for (i, m) in request.messages.iter().enumerate() {
        if !ROLES.contains(&m.role.as_str()) {
            return Err(ApiError::invalid(
                format!("messages[{i}].role"),
                format!(
                    "`messages[{i}].role` must be one of {}; found \"{}\"",
                    ROLES.join(", "),
                    m.role
                ),
            ));
        }
    }
    let system: Vec<String> = request
        .messages
        .iter()
        .enumerate()
        .filter(|(_, m)| matches!(m.role.as_str(), "system" | "developer"))
        .map(|(i, m)| text_of(m.content.as_ref(), &format!("messages[{i}].content")))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .filter(|t| !t.trim().is_empty())
        .collect();
    input.system_extra = (!system.is_empty()).then(|| system.join("\n\n"));

    let Some((last, message)) = request.messages.iter().enumerate().next_back() else {
        return Err(ApiError::invalid(
            "messages",
            "Missing user message in `messages`.",
        ));
    };
    match message.role.as_str() {
        "user" => {
            let param = format!("messages[{last}].content");
            let (text, images) = user_content(message.content.as_ref(), &param)?;
            if text.trim().is_empty() {
                return Err(ApiError::invalid(param, "Missing user message in `messages`."));
            }
            if images.len() > MAX_IMAGE_PARTS {
                return Err(ApiError::invalid(
                    param,
                    format!("at most {MAX_IMAGE_PARTS} images per message; found {}", images.len()),
                ));
            }
            input.prompt = text;
            input.images = images;
        }
        "tool" => {
            let first = request.messages.iter().rposition(|m| m.role != "tool").map_or(0, |p| p + 1);
            for (i, m) in request.messages.iter().enumerate().skip(first) {
                input.tool_results.push((i, tool_result(i, m)?));
            }
        }
        other => {
            return Err(ApiError::invalid(
                format!("messages[{last}].role"),
                format!(
                    "the last message must be the user's, or tool results answering the assistant's tool calls \
                     (the gateway runs one turn for it); found role \"{other}\""
                ),
            ))
        }
    }
    Ok(input)
}

fn tools(request: &ChatCompletionRequest, own_tools: &[String]) -> Result<Vec<ToolSpec>, ApiError> {
    let mut specs: Vec<ToolSpec> = Vec::new();
    for (i, tool) in request.tools.iter().flatten().enumerate() {
        let kind = tool.get("type").and_then(Value::as_str);
        if kind != Some("function") {
            return Err(ApiError::invalid(
                format!("tools[{i}].type"),
                format!("`tools[{i}].type` must be \"function\" (the only tool type of chat completions)"),
            ));
        }
        let function = tool
            .get("function")
            .filter(|f| f.is_object())
            .ok_or_else(|| {
                ApiError::invalid(
                    format!("tools[{i}].function"),
                    format!("`tools[{i}].function` must be an object"),
                )
            })?;
        let name = function
            .get("name")
            .and_then(Value::as_str)
            .map(str::trim)
            .unwrap_or_default();
        if name.is_empty()
            || name.len() > 64
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(ApiError::invalid(
                format!("tools[{i}].function.name"),
                format!(
                    "`tools[{i}].function.name` must be 1-64 characters of a-z, A-Z, 0-9, _ and -"
                ),
            ));
        }
        if own_tools.iter().any(|t| t == name) {
            return Err(ApiError::invalid(
                format!("tools[{i}].function.name"),
                format!(
                    "the tool name \"{name}\" is one of the gateway's own tools ({}); rename yours",
                    own_tools.join(", ")
                ),
            ));
        }
        if specs.iter().any(|s| s.name == name) {
            return Err(ApiError::invalid(
                format!("tools[{i}].function.name"),
                format!("two tools are named \"{name}\""),
            ));
        }
        let parameters = match function.get("parameters") {
            None | Some(Value::Null) => serde_json::json!({"type": "object", "properties": {}}),
            Some(p @ Value::Object(_)) => p.clone(),
            Some(_) => {
                return Err(ApiError::invalid(
                    format!("tools[{i}].function.parameters"),
                    format!("`tools[{i}].function.parameters` must be a JSON Schema object"),
                ))
            }
        };
        let description = function
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        specs.push(ToolSpec {
            name: name.to_owned(),
            description,
            parameters,
        });
    }
    Ok(specs)
}

fn options(request: &ChatCompletionRequest, tools: &[ToolSpec]) -> Result<ModelOptions, ApiError> {
    let range = |name: &str, v: Option<f64>, lo: f64, hi: f64| -> Result<Option<f64>, ApiError> {
        match v {
            Some(x) if !(lo..=hi).contains(&x) => Err(ApiError::invalid(
                name,
                format!("`{name}` must be between {lo} and {hi}; found {x}"),
            )),
            other => Ok(other),
        }
    };
    if request.n.is_some_and(|n| n != 1) {
        return Err(ApiError::invalid(
            "n",
            "the clawctx gateway answers one choice per request; send `n` 1 or leave it out",
        ));
    }
    let max_output_tokens = match (request.max_completion_tokens, request.max_tokens) {
        (Some(0), _) => {
            return Err(ApiError::invalid(
                "max_completion_tokens",
                "`max_completion_tokens` must be at least 1",
            ))
        }
        (None, Some(0)) => {
            return Err(ApiError::invalid(
                "max_tokens",
                "`max_tokens` must be at least 1",
            ))
        }
        (a, b) => a.or(b),
    };
    let stop = match &request.stop {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_str().map(str::to_owned).ok_or_else(|| {
                    ApiError::invalid(
                        format!("stop[{i}]"),
                        format!("`stop[{i}]` must be a string"),
                    )
                })
            })
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(ApiError::invalid(
                "stop",
                "`stop` must be a string or a list of strings",
            ))
        }
    };
    let tool_choice = match &request.tool_choice {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(match s.as_str() {
            "auto" => ToolChoice::Auto,
            "none" => ToolChoice::None,
            "required" => ToolChoice::Required,
            other => {
                return Err(ApiError::invalid(
                    "tool_choice",
                    format!("`tool_choice` must be \"auto\", \"none\", \"required\" or a function; found \"{other}\""),
                ))
            }
        }),
        Some(v @ Value::Object(_)) => {
            let name = v.pointer("/function/name").and_then(Value::as_str).ok_or_else(|| {
                ApiError::invalid("tool_choice.function.name", "`tool_choice` names its function in `function.name`")
            })?;
            if !tools.iter().any(|t| t.name == name) {
                return Err(ApiError::invalid(
                    "tool_choice.function.name",
                    format!("`tool_choice` names \"{name}\", which is not in `tools`"),
                ));
            }
            Some(ToolChoice::Tool(name.to_owned()))
        }
        Some(_) => return Err(ApiError::invalid("tool_choice", "`tool_choice` must be a string or an object")),
    };
    Ok(ModelOptions {
        // f64 all the way to the provider's body, so 0.3 is sent as 0.3 (an f32 on the way
        // turned it into 0.30000001192092896).
        temperature: range("temperature", request.temperature, 0.0, 2.0)?,
        max_output_tokens,
        sampling: Sampling {
            top_p: range("top_p", request.top_p, 0.0, 1.0)?,
            stop,
            seed: request.seed,
            presence_penalty: range("presence_penalty", request.presence_penalty, -2.0, 2.0)?,
            frequency_penalty: range("frequency_penalty", request.frequency_penalty, -2.0, 2.0)?,
            tool_choice,
        },
    })
}

/// The text of a message's content (a string or text parts); `param` names it in errors.
fn text_of(content: Option<&Value>, param: &str) -> Result<String, ApiError> {
    let (text, images) = user_content(content, param)?;
    if !images.is_empty() {
        return Err(ApiError::invalid(
            param,
            format!("`{param}` may hold text only"),
        ));
    }
    Ok(text)
}

/// A user message's text (its text parts joined by new lines) and images.
fn user_content(
    content: Option<&Value>,
    param: &str,
) -> Result<(String, Vec<ImageContent>), ApiError> {
    match content {
        None | Some(Value::Null) => Ok((String::new(), Vec::new())),
        Some(Value::String(s)) => Ok((s.clone(), Vec::new())),
        Some(Value::Array(parts)) => {
            let mut texts = Vec::new();
            let mut images = Vec::new();
            for (j, part) in parts.iter().enumerate() {
                let at = format!("{param}[{j}]");
                match (part.get("type").and_then(Value::as_str), part.get("text")) {
                    (Some("text"), Some(Value::String(t))) => texts.push(t.as_str()),
                    (Some("text"), _) => return Err(ApiError::invalid(format!("{at}.text"), format!("`{at}.text` must be a string"))),
                    (Some("image_url"), _) => images.push(image(part, &at)?),
                    (Some(kind), _) => {
                        return Err(ApiError::invalid(
                            format!("{at}.type"),
                            format!("content parts of type \"{kind}\" are not supported by the clawctx gateway; send text or image_url"),
                        ))
                    }
                    (None, _) => return Err(ApiError::invalid(at.clone(), format!("`{at}` must be an object with a `type`"))),
                }
            }
            Ok((texts.join("\n"), images))
        }
        Some(other) => Err(ApiError::invalid(
            param,
            format!(
                "`{param}` must be a string or a list of content parts; found {}",
                json_kind(other)
            ),
        )),
    }
}

/// An `image_url` part: only inline `data:image/<type>;base64,<data>` URLs.
fn image(part: &Value, at: &str) -> Result<ImageContent, ApiError> {
    let url = match part.get("image_url") {
        Some(Value::String(u)) => u.as_str(),
        Some(Value::Object(o)) => o.get("url").and_then(Value::as_str).unwrap_or_default(),
        _ => "",
    };
    let param = format!("{at}.image_url.url");
    if url.is_empty() {
        return Err(ApiError::invalid(
            param.clone(),
            format!("`{param}` must be a string"),
        ));
    }
    let Some(rest) = url.strip_prefix("data:") else {
        return Err(ApiError::invalid(
            param,
            "the clawctx gateway takes images as data: URLs (data:image/png;base64,...) only; it does not fetch remote images",
        ));
    };
    let parsed = rest
        .split_once(',')
        .and_then(|(meta, data)| meta.strip_suffix(";base64").map(|mime| (mime, data)));
    match parsed {
        Some((mime, data))
            if mime.starts_with("image/")
                && !data.is_empty()
                && data
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=')) =>
        {
            Ok(ImageContent {
                data: data.to_owned(),
                mime_type: mime.to_owned(),
                extra: JsonMap::new(),
            })
        }
        _ => Err(ApiError::invalid(
            param,
            "an image data: URL must read data:image/<type>;base64,<base64 data>",
        )),
    }
}

fn tool_result(
    i: usize,
    m: &crate::openai_wire::ChatMessage,
) -> Result<ToolResultMessage, ApiError> {
    let id = m.tool_call_id.as_deref().map(str::trim).unwrap_or_default();
    if id.is_empty() {
        return Err(ApiError::invalid(
            format!("messages[{i}].tool_call_id"),
            format!("`messages[{i}].tool_call_id` must name the tool call this message answers"),
        ));
    }
    let text = text_of(m.content.as_ref(), &format!("messages[{i}].content"))?;
    Ok(ToolResultMessage {
        tool_call_id: id.to_owned(),
        tool_name: m.name.clone().unwrap_or_default(),
        content: Content::Blocks(vec![ContentBlock::text(text)]),
        details: None,
        is_error: Some(false),
        timestamp: Some(serde_json::Number::from(now_ms())),
        extra: JsonMap::new(),
    })
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use axum::http::StatusCode;
    use serde_json::json;

    fn req(body: Value) -> ChatCompletionRequest {
        serde_json::from_value(body).unwrap()
    }

    fn param_of(body: Value) -> String {
        let e = read(&req(body.clone()), &["lcm_grep".to_owned()]).unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        e.param
            .unwrap_or_else(|| panic!("no param for {body}: {}", e.message))
    }

    #[test]
    fn the_prompt_is_the_last_user_message_and_system_messages_are_appended() {
        let r = req(json!({"messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "ok"},
            {"role": "developer", "content": [{"type": "text", "text": "use metric"}]},
            {"role": "user", "content": [{"type": "text", "text": "second"}, {"type": "text", "text": "part"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,QUJD"}}]}
        ]}));
        let input = read(&r, &[]).unwrap();
        assert_eq!(input.prompt, "second\npart");
        assert_eq!(
            input.system_extra.as_deref(),
            Some("be brief\n\nuse metric")
        );
        assert_eq!(input.images.len(), 1);
        assert_eq!(
            (
                input.images[0].mime_type.as_str(),
                input.images[0].data.as_str()
            ),
            ("image/png", "QUJD")
        );
        assert!(input.tool_results.is_empty());
    }

    #[test]
    fn trailing_tool_messages_continue_the_turn() {
        let r = req(json!({"messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "warm"}]}
        ]}));
        let input = read(&r, &[]).unwrap();
        let ids: Vec<(usize, &str)> = input
            .tool_results
            .iter()
            .map(|(i, t)| (*i, t.tool_call_id.as_str()))
            .collect();
        assert_eq!(ids, [(2, "c1"), (3, "c2")]);
        assert_eq!(
            input.tool_results[1].1.content,
            Content::Blocks(vec![ContentBlock::text("warm")])
        );
    }

    #[test]
    fn sampling_and_tool_choice_are_read() {
        let r = req(json!({
            "messages": [{"role": "user", "content": "x"}],
            "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "temperature": 0.5, "top_p": 0.9, "max_tokens": 77, "stop": "END", "seed": 7,
            "presence_penalty": 0.1, "frequency_penalty": -0.1
        }));
        let input = read(&r, &["lcm_grep".into()]).unwrap();
        assert_eq!(input.tools[0].name, "get_weather");
        let o = input.options;
        assert_eq!((o.temperature, o.max_output_tokens), (Some(0.5), Some(77)));
        assert_eq!(o.sampling.stop, ["END"]);
        assert_eq!((o.sampling.top_p, o.sampling.seed), (Some(0.9), Some(7)));
        assert_eq!(
            o.sampling.tool_choice,
            Some(ToolChoice::Tool("get_weather".into()))
        );
    }

    #[test]
    fn bad_fields_are_named() {
        let user = json!([{"role": "user", "content": "a"}]);
        let tool = |f: Value| json!({"messages": user, "tools": [f]});
        let cases = [
            (json!({"messages": []}), "messages"),
            (
                json!({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}),
                "messages[1].role",
            ),
            (
                json!({"messages": [{"role": "robot", "content": "a"}]}),
                "messages[0].role",
            ),
            (
                json!({"messages": [{"role": "user", "content": 5}]}),
                "messages[0].content",
            ),
            (
                json!({"messages": [{"role": "user", "content": "   "}]}),
                "messages[0].content",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]}),
                "messages[0].content[0].type",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}]}),
                "messages[0].content[0].image_url.url",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:text/plain;base64,QQ=="}}]}]}),
                "messages[0].content[0].image_url.url",
            ),
            (
                json!({"messages": [{"role": "user", "content": std::iter::once(json!({"type": "text", "text": "x"}))
                    .chain(std::iter::repeat_n(json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,QQ=="}}), 9))
                    .collect::<Vec<_>>()}]}),
                "messages[0].content",
            ),
            (
                json!({"messages": [{"role": "tool", "content": "r"}]}),
                "messages[0].tool_call_id",
            ),
            (tool(json!({"type": "retrieval"})), "tools[0].type"),
            (tool(json!({"type": "function"})), "tools[0].function"),
            (
                tool(json!({"type": "function", "function": {"name": "lcm_grep"}})),
                "tools[0].function.name",
            ),
            (
                tool(json!({"type": "function", "function": {"name": "has space"}})),
                "tools[0].function.name",
            ),
            (
                tool(json!({"type": "function", "function": {"name": "f", "parameters": 3}})),
                "tools[0].function.parameters",
            ),
            (
                json!({"messages": user, "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
                "tool_choice.function.name",
            ),
            (
                json!({"messages": user, "tool_choice": "sometimes"}),
                "tool_choice",
            ),
            (json!({"messages": user, "temperature": 3.5}), "temperature"),
            (json!({"messages": user, "top_p": 1.5}), "top_p"),
            (json!({"messages": user, "n": 2}), "n"),
            (json!({"messages": user, "max_tokens": 0}), "max_tokens"),
            (json!({"messages": user, "stop": ["a", 1]}), "stop[1]"),
        ];
        for (body, param) in cases {
            assert_eq!(param_of(body.clone()), param, "{body}");
        }
    }
}
