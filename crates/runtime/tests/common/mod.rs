//! Shared pieces of the runtime's integration tests: a mock OpenAI-compatible server on
//! loopback (wiremock) answering from a queue, provider config pointing at it, and small
//! engines and tools.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use clawctx_engine::legacy::{legacy_info, LegacyEngine};
use clawctx_engine::*;
use clawctx_protocol::*;
use clawctx_runtime::{select_backend, Backend};
use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// One queued reply of the mock provider.
#[derive(Clone, Debug)]
pub enum Reply {
    Text(String),
    Tool {
        id: String,
        name: String,
        args: Value,
    },
    Overflow,
    Garbage,
    CutStream(String),
}

pub fn text(t: &str) -> Reply {
    Reply::Text(t.to_owned())
}

pub fn tool(id: &str, name: &str, args: Value) -> Reply {
    Reply::Tool {
        id: id.into(),
        name: name.into(),
        args,
    }
}

#[derive(Clone, Default)]
struct Queue(Arc<Mutex<VecDeque<Reply>>>);

fn sse(chunks: &[Value], done: bool) -> String {
    let mut s: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    if done {
        s.push_str("data: [DONE]\n\n");
    }
    s
}

impl Respond for Queue {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let stream = body.get("stream").and_then(Value::as_bool) == Some(true);
        let usage = json!({"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110});
        let Some(reply) = self.0.lock().unwrap().pop_front() else {
            return ResponseTemplate::new(500)
                .set_body_json(json!({"error": {"message": "mock script exhausted"}}));
        };
        match reply {
            Reply::Text(t) if stream => ResponseTemplate::new(200).set_body_raw(
                sse(
                    &[
                        json!({"choices": [{"index": 0, "delta": {"content": t}}]}),
                        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage}),
                    ],
                    true,
                ),
                "text/event-stream",
            ),
            Reply::Text(t) => ResponseTemplate::new(200).set_body_json(json!({
                "id": "chatcmpl-mock",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": t}, "finish_reason": "stop"}],
                "usage": usage
            })),
            Reply::Tool { id, name, args } if stream => ResponseTemplate::new(200).set_body_raw(
                sse(
                    &[
                        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}}]}}]}),
                        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}], "usage": usage}),
                    ],
                    true,
                ),
                "text/event-stream",
            ),
            Reply::Tool { id, name, args } => ResponseTemplate::new(200).set_body_json(json!({
                "id": "chatcmpl-mock",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [
                    {"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}}
                ]}, "finish_reason": "tool_calls"}],
                "usage": usage
            })),
            Reply::Overflow => ResponseTemplate::new(400).set_body_json(json!({"error": {
                "message": "This model's maximum context length is 8192 tokens. However, your messages resulted in 9100 tokens. Please reduce the length of the messages.",
                "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}})),
            Reply::Garbage => {
                ResponseTemplate::new(200).set_body_raw("<html>502 upstream proxy hiccup</html>", "text/html")
            }
            Reply::CutStream(t) => ResponseTemplate::new(200).set_body_raw(
                format!(
                    "{}data: {{\"choices\": [{{\"index\": 0, \"del",
                    sse(&[json!({"choices": [{"index": 0, "delta": {"content": t}}]})], false)
                ),
                "text/event-stream",
            ),
        }
    }
}

/// A mock OpenAI-compatible server answering from a queue.
pub struct MockLlm {
    pub server: MockServer,
    queue: Queue,
}

impl MockLlm {
    pub async fn start() -> Self {
        let server = MockServer::start().await;
        let queue = Queue::default();
        Mock::given(method("POST"))
            .and(path("/v1/chat/completions"))
            .respond_with(queue.clone())
            .mount(&server)
            .await;
        Self { server, queue }
    }

    pub fn push(&self, replies: impl IntoIterator<Item = Reply>) {
        self.queue.0.lock().unwrap().extend(replies);
    }

    pub fn pending(&self) -> usize {
        self.queue.0.lock().unwrap().len()
    }

    /// Every request body received so far.
    pub async fn bodies(&self) -> Vec<Value> {
        self.server
            .received_requests()
            .await
            .unwrap_or_default()
            .iter()
            .map(|r| serde_json::from_slice(&r.body).unwrap())
            .collect()
    }

    /// The config with one provider `mock` pointed at this server.
    pub fn config(&self, window: u64, max_tokens: u64) -> Value {
        json!({"models": {"providers": {"mock": {
            "api": "openai-completions",
            "baseUrl": format!("{}/v1", self.server.uri()),
            "models": [{"id": "test-model", "contextWindow": window, "maxTokens": max_tokens}],
            "maxRetries": 0, "timeoutMs": 10000
        }}}})
    }

    pub fn backend(&self, window: u64, max_tokens: u64) -> Backend {
        select_backend(
            &self.config(window, max_tokens),
            Some("mock/test-model"),
            &|_| None,
        )
        .unwrap()
    }
}

/// A runtime tool that "reads" a file.
pub struct ReadFile;

#[async_trait]
impl AgentTool for ReadFile {
    fn name(&self) -> &str {
        "read_file"
    }
    fn description(&self) -> &str {
        "Reads a file of the workspace."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})
    }
    async fn execute(&self, arguments: Value, _context: ToolCallContext) -> Result<String, String> {
        match arguments.get("path").and_then(Value::as_str) {
            Some(p) => Ok(format!(
                "contents of {p}: fn main() {{ println!(\"hi\"); }}"
            )),
            None => Err("missing `path`".into()),
        }
    }
}

/// `legacy` plus a background `maintain()` that trims tool results through the runtime's
/// `rewriteTranscriptEntries`; it records every call. Compaction still delegates to the
/// runtime exactly as legacy does.
pub struct MaintainingLegacy {
    pub calls: Mutex<Vec<(Method, Value)>>,
}

impl MaintainingLegacy {
    pub fn new() -> Self {
        Self {
            calls: Mutex::new(Vec::new()),
        }
    }
    pub fn count(&self, m: Method) -> usize {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|(x, _)| *x == m)
            .count()
    }
    pub fn params(&self, m: Method) -> Vec<Value> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|(x, _)| *x == m)
            .map(|(_, v)| v.clone())
            .collect()
    }
    fn record<T: serde::Serialize>(&self, m: Method, p: &T) {
        self.calls
            .lock()
            .unwrap()
            .push((m, serde_json::to_value(p).unwrap()));
    }
}

#[async_trait]
impl ContextEngine for MaintainingLegacy {
    fn info(&self) -> ContextEngineInfo {
        ContextEngineInfo {
            turn_maintenance_mode: Some(TurnMaintenanceMode::Background),
            ..legacy_info()
        }
    }
    fn methods(&self) -> MethodSet {
        LegacyEngine.methods().with(Method::Maintain)
    }
    fn is_runtime_compaction_delegate(&self) -> bool {
        true
    }
    async fn ingest(
        &self,
        p: &IngestParams,
        cx: &CallContext,
    ) -> Result<IngestResult, EngineError> {
        self.record(Method::Ingest, p);
        LegacyEngine.ingest(p, cx).await
    }
    async fn assemble(
        &self,
        p: &AssembleParams,
        cx: &CallContext,
    ) -> Result<AssembleResult, EngineError> {
        self.record(Method::Assemble, p);
        LegacyEngine.assemble(p, cx).await
    }
    async fn compact(
        &self,
        p: &CompactParams,
        cx: &CallContext,
    ) -> Result<CompactResult, EngineError> {
        self.record(Method::Compact, p);
        LegacyEngine.compact(p, cx).await
    }
    async fn after_turn(&self, p: &AfterTurnParams, cx: &CallContext) -> Result<(), EngineError> {
        self.record(Method::AfterTurn, p);
        LegacyEngine.after_turn(p, cx).await
    }
    async fn maintain(
        &self,
        p: &MaintainParams,
        cx: &CallContext,
    ) -> Result<TranscriptRewriteResult, EngineError> {
        self.record(Method::Maintain, p);
        let services = cx
            .services
            .clone()
            .ok_or_else(|| EngineError::failed("no runtime services"))?;
        // Trim every tool result that is not trimmed yet.
        let file = clawctx_transcript::SessionFile::open(&p.session_file)
            .map_err(|e| EngineError::failed(e.to_string()))?;
        let replacements: Vec<TranscriptReplacement> = file
            .active_path()
            .iter()
            .filter_map(|e| match e.message() {
                Some(AgentMessage::ToolResult(r))
                    if !r.content.blocks().iter().any(
                        |b| matches!(b, ContentBlock::Text(t) if t.text.starts_with("[trimmed]")),
                    ) =>
                {
                    let mut r = r.clone();
                    r.content = Content::Blocks(vec![ContentBlock::text(format!(
                        "[trimmed] {}",
                        r.tool_name
                    ))]);
                    Some(TranscriptReplacement {
                        entry_id: e.id.clone(),
                        message: AgentMessage::ToolResult(r),
                    })
                }
                _ => None,
            })
            .collect();
        Ok(services
            .rewrite_transcript_entries(TranscriptRewriteRequest {
                replacements,
                allowed_rewrite_suffix_entry_ids: None,
            })
            .await)
    }
}

/// A pass-through engine with a `systemPromptAddition`, a tool of its own, and an optional
/// `contextProjection` (thread_bootstrap with an epoch that changes on compact).
pub struct AdditionEngine {
    pub projection: bool,
    pub epoch: Mutex<u32>,
    pub requires: Option<Vec<String>>,
}

impl AdditionEngine {
    pub fn new() -> Self {
        Self {
            projection: false,
            epoch: Mutex::new(1),
            requires: None,
        }
    }
}

pub struct RecallTool;

#[async_trait]
impl AgentTool for RecallTool {
    fn name(&self) -> &str {
        "recall"
    }
    fn description(&self) -> &str {
        "Searches compacted history."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"query": {"type": "string"}}})
    }
    async fn execute(
        &self,
        _arguments: Value,
        _context: ToolCallContext,
    ) -> Result<String, String> {
        Ok("nothing found".into())
    }
}

#[async_trait]
impl ContextEngine for AdditionEngine {
    fn info(&self) -> ContextEngineInfo {
        let mut info = ContextEngineInfo::new("addition", "Addition test engine");
        if let Some(req) = &self.requires {
            info.host_requirements = Some(
                [(
                    ContextEngineOperation::AgentRun,
                    ContextEngineHostRequirements {
                        required_capabilities: req
                            .iter()
                            .map(|c| HostCapability(c.clone()))
                            .collect(),
                        unsupported_message: Some("Use the embedded runner.".into()),
                    },
                )]
                .into_iter()
                .collect(),
            );
        }
        info
    }
    fn tools(&self) -> Vec<Arc<dyn AgentTool>> {
        vec![Arc::new(RecallTool)]
    }
    async fn ingest(
        &self,
        _p: &IngestParams,
        _cx: &CallContext,
    ) -> Result<IngestResult, EngineError> {
        Ok(IngestResult { ingested: false })
    }
    async fn assemble(
        &self,
        p: &AssembleParams,
        _cx: &CallContext,
    ) -> Result<AssembleResult, EngineError> {
        Ok(AssembleResult {
            messages: p.messages.clone(),
            estimated_tokens: 0,
            system_prompt_addition: Some("Remember: the project codename is Falcon.".into()),
            context_projection: self.projection.then(|| ContextProjection {
                mode: ContextProjectionMode::ThreadBootstrap,
                epoch: Some(format!("e{}", self.epoch.lock().unwrap())),
                fingerprint: None,
            }),
            ..Default::default()
        })
    }
    async fn compact(
        &self,
        _p: &CompactParams,
        _cx: &CallContext,
    ) -> Result<CompactResult, EngineError> {
        *self.epoch.lock().unwrap() += 1;
        Ok(CompactResult {
            ok: true,
            compacted: true,
            reason: None,
            result: None,
        })
    }
}
