//! The scripted provider: replies come from a list (a JSONL file or memory), not a model.
//!
//! Tests, demos and `replay` need a model whose answers are known in advance, including its
//! failures. Each script line is one reply: a JSON string (text), an object with `content`
//! and/or `toolCalls` (optional `usage`, `stopReason`, `thinking`), or
//! `{"error": {"kind": ..., "message": ...}}` to fail that call with the given [`ModelError`]
//! kind. Usage not given in the script is computed with `clawctx-tokens`, so numbers are
//! deterministic. The provider also records every request it received, so tests can check what
//! a caller sent.

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use clawctx_protocol::{ContentBlock, JsonMap, ThinkingContent, ToolCall, Usage};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::types::{MessageParts, Sink};
use crate::{
    Completion, CompletionRequest, EventSender, ModelError, ModelProvider, StopReason, StreamEvent,
};

/// The API family string for this provider.
pub const SCRIPTED_API: &str = "scripted";

/// What the scripted provider does after its last reply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Exhaustion {
    /// Fail with a `BadResponse` naming the script length (the default: a test that makes more
    /// calls than it scripted should fail loudly).
    #[default]
    Error,
    /// Start again from the first reply.
    Cycle,
}

/// One scripted tool call.
#[derive(Clone, Debug, PartialEq)]
pub struct ScriptedToolCall {
    /// Call id; `call_<reply>_<index>` when not given.
    pub id: Option<String>,
    /// Tool name.
    pub name: String,
    /// Arguments object.
    pub arguments: Value,
}

/// One scripted reply.
// Scripts are short lists read once; boxing the larger variant would only complicate matching.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum ScriptedReply {
    /// A successful reply.
    Reply {
        /// Answer text (may be empty).
        content: String,
        /// Reasoning text, reported as a thinking block.
        thinking: Option<String>,
        /// Tool calls.
        tool_calls: Vec<ScriptedToolCall>,
        /// Usage; computed from the request and reply when absent.
        usage: Option<Usage>,
        /// Stop reason; `toolUse` when there are tool calls, otherwise `stop`.
        stop_reason: Option<StopReason>,
        /// `errorMessage` for a reply scripted with `stopReason: "error"`.
        error_message: Option<String>,
    },
    /// A failing call.
    Error(ModelError),
}

impl ScriptedReply {
    /// A plain text reply.
    pub fn text(text: impl Into<String>) -> Self {
        ScriptedReply::Reply {
            content: text.into(),
            thinking: None,
            tool_calls: Vec::new(),
            usage: None,
            stop_reason: None,
            error_message: None,
        }
    }

    /// Parses one script line (see the module docs for the shapes).
    pub fn from_json(value: &Value) -> Result<Self, String> {
        let obj = match value {
            Value::String(s) => return Ok(ScriptedReply::text(s.clone())),
            Value::Object(o) => o,
            other => {
                return Err(format!(
                    "a reply must be a string or an object, got {other}"
                ))
            }
        };
        if let Some(err) = obj.get("error") {
            let kind = err
                .get("kind")
                .and_then(Value::as_str)
                .ok_or("`error.kind` must be a string")?;
            let message = err
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("scripted failure")
                .to_owned();
            return error_of_kind(kind, message, err).map(ScriptedReply::Error);
        }
        let content = match obj.get("content") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => return Err(format!("`content` must be a string, got {other}")),
        };
        let mut tool_calls = Vec::new();
        for call in obj
            .get("toolCalls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = call
                .get("name")
                .and_then(Value::as_str)
                .ok_or("every tool call needs a `name`")?;
            tool_calls.push(ScriptedToolCall {
                id: call.get("id").and_then(Value::as_str).map(str::to_owned),
                name: name.to_owned(),
                arguments: call
                    .get("arguments")
                    .cloned()
                    .unwrap_or_else(|| Value::Object(JsonMap::new())),
            });
        }
        let usage = match obj.get("usage") {
            None | Some(Value::Null) => None,
            Some(u) => Some(
                serde_json::from_value::<Usage>(u.clone())
                    .map_err(|e| format!("invalid `usage`: {e}"))?,
            ),
        };
        let stop_reason = match obj.get("stopReason").and_then(Value::as_str) {
            None => None,
            Some(s) => {
                Some(StopReason::parse(s).ok_or_else(|| format!("unknown stopReason `{s}`"))?)
            }
        };
        Ok(ScriptedReply::Reply {
            content,
            thinking: obj
                .get("thinking")
                .and_then(Value::as_str)
                .map(str::to_owned),
            tool_calls,
            usage,
            stop_reason,
            error_message: obj
                .get("errorMessage")
                .and_then(Value::as_str)
                .map(str::to_owned),
        })
    }
}

fn error_of_kind(kind: &str, message: String, err: &Value) -> Result<ModelError, String> {
    let provider = "scripted".to_owned();
    Ok(match kind {
        "context_overflow" => ModelError::ContextOverflow { provider, message, observed_tokens: err.get("observedTokens").and_then(Value::as_u64) },
        "rate_limited" => ModelError::RateLimited {
            provider,
            message,
            retry_after: err.get("retryAfterMs").and_then(Value::as_u64).map(Duration::from_millis),
        },
        "auth" => ModelError::Auth { provider, status: 401, message },
        "unavailable" => ModelError::Unavailable { provider, message, status: Some(503), timeout: false },
        "timeout" => ModelError::Unavailable { provider, message, status: None, timeout: true },
        "bad_response" => ModelError::BadResponse { provider, message },
        "rejected" => ModelError::Rejected { provider, status: 400, message },
        "aborted" => ModelError::Aborted,
        other => {
            return Err(format!(
                "unknown error kind `{other}`; known: context_overflow, rate_limited, auth, unavailable, timeout, bad_response, rejected, aborted"
            ))
        }
    })
}

/// Replies from a script. Requests are recorded and readable with [`Self::requests`].
#[derive(Debug)]
pub struct ScriptedProvider {
    id: String,
    replies: Vec<ScriptedReply>,
    exhaustion: Exhaustion,
    /// Whether requests are kept for [`Self::requests`] (tests); a long replay does not keep
    /// every context it sent.
    record: bool,
    state: Mutex<ScriptState>,
}

#[derive(Debug, Default)]
struct ScriptState {
    next: usize,
    served: usize,
    requests: Vec<CompletionRequest>,
}

impl ScriptedProvider {
    /// A provider replying with `replies` in order.
    pub fn new(replies: Vec<ScriptedReply>, exhaustion: Exhaustion) -> Self {
        Self {
            id: "scripted".into(),
            replies,
            exhaustion,
            record: true,
            state: Mutex::new(ScriptState::default()),
        }
    }

    /// Text replies, in order.
    pub fn from_texts<I, S>(texts: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::new(
            texts.into_iter().map(ScriptedReply::text).collect(),
            Exhaustion::Error,
        )
    }

    /// Parses a JSONL script (blank lines ignored). Errors name the line.
    pub fn parse_script(text: &str) -> Result<Vec<ScriptedReply>, String> {
        let mut replies = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let value: Value =
                serde_json::from_str(line).map_err(|e| format!("line {}: not JSON: {e}", i + 1))?;
            replies.push(
                ScriptedReply::from_json(&value).map_err(|e| format!("line {}: {e}", i + 1))?,
            );
        }
        Ok(replies)
    }

    /// Reads a JSONL script file.
    pub fn from_file(path: &Path, exhaustion: Exhaustion) -> Result<Self, ModelError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ModelError::config("script", format!("cannot read {}: {e}", path.display()))
        })?;
        let replies = Self::parse_script(&text)
            .map_err(|e| ModelError::config("script", format!("{}: {e}", path.display())))?;
        Ok(Self::new(replies, exhaustion))
    }

    /// Renames the provider (the `provider` field of its replies).
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = id.into();
        self
    }

    /// Stops keeping requests ([`Self::requests`] then returns none): for long runs whose
    /// requests nobody reads, where keeping each one would grow memory with every call.
    pub fn without_recording(mut self) -> Self {
        self.record = false;
        self
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<CompletionRequest> {
        self.state
            .lock()
            .map(|s| s.requests.clone())
            .unwrap_or_default()
    }

    /// How many replies (including scripted errors) have been served.
    pub fn served(&self) -> usize {
        self.state.lock().map(|s| s.served).unwrap_or(0)
    }

    fn next_reply(
        &self,
        request: &CompletionRequest,
    ) -> Result<(usize, ScriptedReply), ModelError> {
        let mut state = self.state.lock().map_err(|_| ModelError::BadResponse {
            provider: self.id.clone(),
            message: "script state poisoned by an earlier panic".into(),
        })?;
        if self.record {
            state.requests.push(request.clone());
        }
        if state.next >= self.replies.len() {
            if self.exhaustion == Exhaustion::Cycle && !self.replies.is_empty() {
                state.next = 0;
            } else {
                return Err(ModelError::BadResponse {
                    provider: self.id.clone(),
                    message: format!(
                        "script exhausted: all {} scripted replies were used",
                        self.replies.len()
                    ),
                });
            }
        }
        let index = state.next;
        state.next += 1;
        state.served += 1;
        Ok((state.served, self.replies[index].clone()))
    }
}

/// Deterministic usage for a scripted reply: the one estimator over what was sent and returned.
fn estimate_usage(request: &CompletionRequest, blocks: &[ContentBlock]) -> Usage {
    let input = clawctx_tokens::messages_tokens(&request.messages)
        + request
            .system_prompt
            .as_deref()
            .map(clawctx_tokens::text_tokens)
            .unwrap_or(0);
    let output =
        clawctx_tokens::content_tokens(&clawctx_protocol::Content::Blocks(blocks.to_vec()));
    Usage {
        input,
        output,
        total_tokens: input + output,
        ..Usage::default()
    }
}

#[async_trait]
impl ModelProvider for ScriptedProvider {
    fn id(&self) -> &str {
        &self.id
    }

    fn api(&self) -> &str {
        SCRIPTED_API
    }

    async fn complete(
        &self,
        request: CompletionRequest,
        events: Option<&EventSender>,
        cancel: &CancellationToken,
    ) -> Result<Completion, ModelError> {
        if cancel.is_cancelled() {
            return Err(ModelError::Aborted);
        }
        let (number, reply) = self.next_reply(&request)?;
        let (content, thinking, tool_calls, usage, stop_reason, error_message) = match reply {
            ScriptedReply::Error(ModelError::Aborted) => return Err(ModelError::Aborted),
            ScriptedReply::Error(e) => return Err(rename_provider(e, &self.id)),
            ScriptedReply::Reply {
                content,
                thinking,
                tool_calls,
                usage,
                stop_reason,
                error_message,
            } => (
                content,
                thinking,
                tool_calls,
                usage,
                stop_reason,
                error_message,
            ),
        };
        let sink = Sink::new(events);
        let mut blocks = Vec::new();
        if let Some(t) = thinking {
            sink.emit(StreamEvent::ThinkingDelta(t.clone()));
            blocks.push(ContentBlock::Thinking(ThinkingContent {
                thinking: t,
                thinking_signature: None,
                extra: JsonMap::new(),
            }));
        }
        if !content.is_empty() {
            sink.emit(StreamEvent::TextDelta(content.clone()));
            blocks.push(ContentBlock::text(content));
        }
        let has_calls = !tool_calls.is_empty();
        for (i, call) in tool_calls.into_iter().enumerate() {
            let id = call.id.unwrap_or_else(|| format!("call_{number}_{i}"));
            sink.emit(StreamEvent::ToolCallStart {
                index: i,
                id: id.clone(),
                name: call.name.clone(),
            });
            sink.emit(StreamEvent::ToolCallDelta {
                index: i,
                fragment: call.arguments.to_string(),
            });
            blocks.push(ContentBlock::ToolCall(ToolCall {
                id,
                name: call.name,
                arguments: call.arguments,
                thought_signature: None,
                extra: JsonMap::new(),
            }));
        }
        let usage = usage.unwrap_or_else(|| estimate_usage(&request, &blocks));
        let stop_reason = stop_reason.unwrap_or(if has_calls {
            StopReason::ToolUse
        } else {
            StopReason::Stop
        });
        sink.emit(StreamEvent::Done {
            stop_reason,
            usage: crate::types::finish_usage(usage.clone()),
        });
        let parts = MessageParts {
            blocks,
            usage,
            stop_reason,
            error_message,
            response_id: None,
        };
        Ok(parts.into_completion(SCRIPTED_API, &self.id, &request.model))
    }
}

fn rename_provider(e: ModelError, id: &str) -> ModelError {
    let id = id.to_owned();
    match e {
        ModelError::ContextOverflow {
            message,
            observed_tokens,
            ..
        } => ModelError::ContextOverflow {
            provider: id,
            message,
            observed_tokens,
        },
        ModelError::RateLimited {
            message,
            retry_after,
            ..
        } => ModelError::RateLimited {
            provider: id,
            message,
            retry_after,
        },
        ModelError::Auth {
            status, message, ..
        } => ModelError::Auth {
            provider: id,
            status,
            message,
        },
        ModelError::Unavailable {
            message,
            status,
            timeout,
            ..
        } => ModelError::Unavailable {
            provider: id,
            message,
            status,
            timeout,
        },
        ModelError::Rejected {
            status, message, ..
        } => ModelError::Rejected {
            provider: id,
            status,
            message,
        },
        ModelError::BadResponse { message, .. } => ModelError::BadResponse {
            provider: id,
            message,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clawctx_protocol::AgentMessage;

    fn req() -> CompletionRequest {
        CompletionRequest {
            model: "m".into(),
            messages: vec![AgentMessage::user("hello there")],
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn cycles_or_errors_when_exhausted() {
        let cancel = CancellationToken::new();
        let p = ScriptedProvider::new(vec![ScriptedReply::text("a")], Exhaustion::Cycle);
        assert_eq!(p.complete(req(), None, &cancel).await.unwrap().text(), "a");
        assert_eq!(p.complete(req(), None, &cancel).await.unwrap().text(), "a");
        let p = ScriptedProvider::from_texts(["a"]);
        p.complete(req(), None, &cancel).await.unwrap();
        let e = p.complete(req(), None, &cancel).await.unwrap_err();
        assert!(e.to_string().contains("script exhausted"), "{e}");
    }

    #[tokio::test]
    async fn usage_is_estimated_deterministically() {
        let p = ScriptedProvider::from_texts(["Hello, world!"]);
        let c = p
            .complete(req(), None, &CancellationToken::new())
            .await
            .unwrap();
        let u = c.usage();
        assert_eq!(u.output, 4);
        assert_eq!(
            u.input,
            clawctx_tokens::message_tokens(&AgentMessage::user("hello there"))
        );
        assert_eq!(u.total_tokens, u.input + 4);
    }

    #[test]
    fn bad_lines_are_named() {
        let e = ScriptedProvider::parse_script("\"ok\"\n{\"error\":{\"kind\":\"meteor\"}}")
            .unwrap_err();
        assert!(e.starts_with("line 2:") && e.contains("meteor"), "{e}");
    }
}
