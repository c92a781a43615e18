//! Boundary tests for clawctx-model: real HTTP on 127.0.0.1 (wiremock) speaking each provider's
//! wire format, the scripted provider from a file, and the LLM summarizer with its guards.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use clawctx_model::{
    BreakerState, CircuitBreaker, Completion, CompletionRequest, ModelError, ModelProvider,
    ModelsConfig, ScriptedProvider, ScriptedReply, SpendGuard, StopReason, StreamEvent, ToolSpec,
};
use clawctx_model::{Exhaustion, LlmSummarizer};
use clawctx_protocol::{AgentMessage, ReasonCode};
use clawctx_summarize::{SummarizeError, Summarizer, SummaryKind, SummaryRequest};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const OPENAI_KEY: &str = "sk-test-openai-0123456789";
const ANTHROPIC_KEY: &str = "sk-ant-test-9876543210";

fn env(name: &str) -> Option<String> {
    match name {
        "TEST_OPENAI_KEY" => Some(OPENAI_KEY.into()),
        "TEST_ANTHROPIC_KEY" => Some(ANTHROPIC_KEY.into()),
        _ => None,
    }
}

/// Builds a provider from config, the way the host does, pointed at the mock server.
fn provider(api: &str, server: &MockServer, extra: Value) -> Arc<dyn ModelProvider> {
    let (base, key_env) = match api {
        "openai-completions" => (format!("{}/v1", server.uri()), "TEST_OPENAI_KEY"),
        _ => (server.uri(), "TEST_ANTHROPIC_KEY"),
    };
    let mut p = json!({
        "api": api, "baseUrl": base, "apiKeyEnv": key_env,
        "models": [{"id": "test-model", "contextWindow": 8192, "maxTokens": 1024}],
        "maxRetries": 2, "retryBaseDelayMs": 10, "retryJitter": false, "timeoutMs": 5000
    });
    if let (Some(p), Some(extra)) = (p.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            p.insert(k.clone(), v.clone());
        }
    }
    let cfg = ModelsConfig::from_config(&json!({"models": {"providers": {"p": p}}}), &env).unwrap();
    cfg.provider_for("p/test-model").unwrap().0
}

fn simple_request() -> CompletionRequest {
    CompletionRequest {
        model: "test-model".into(),
        system_prompt: Some("You are terse.".into()),
        messages: vec![AgentMessage::user("Say hi")],
        max_output_tokens: Some(64),
        ..Default::default()
    }
}

/// A request exercising every conversion: system, user text, assistant text + tool call,
/// tool result, compaction summary, a custom role, tools.
fn rich_request() -> CompletionRequest {
    let mut call = AgentMessage::tool_call("call_1", "read_file", json!({"path": "src/main.rs"}));
    if let AgentMessage::Assistant(a) = &mut call {
        if let clawctx_protocol::Content::Blocks(b) = &mut a.content {
            b.insert(0, clawctx_protocol::ContentBlock::text("Let me look."));
        }
    }
    let compaction: AgentMessage =
        serde_json::from_value(json!({"role": "compactionSummary", "summary": "## Goal\nFix the build", "tokensBefore": 1000})).unwrap();
    let unknown: AgentMessage =
        serde_json::from_value(json!({"role": "hookNote", "content": "ci is red"})).unwrap();
    CompletionRequest {
        model: "test-model".into(),
        system_prompt: Some("You are a coding agent.".into()),
        messages: vec![
            compaction,
            AgentMessage::user("Why does it fail?"),
            call,
            AgentMessage::tool_result("call_1", "read_file", "fn main() { let x: u32 = \"a\"; }"),
            unknown,
        ],
        tools: vec![ToolSpec {
            name: "read_file".into(),
            description: "Read a file".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        }],
        max_output_tokens: Some(256),
        temperature: Some(0.0),
        sampling: Default::default(),
        cache_key: None,
    }
}

fn sse(events: &[String]) -> String {
    events.iter().map(|e| format!("{e}\n\n")).collect()
}

fn sse_response(body: String) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(body, "text/event-stream")
}

fn data(v: Value) -> String {
    format!("data: {v}")
}

fn anthropic_event(kind: &str, v: Value) -> String {
    format!("event: {kind}\ndata: {v}")
}

async fn complete(
    p: &Arc<dyn ModelProvider>,
    req: CompletionRequest,
) -> Result<Completion, ModelError> {
    p.complete(req, None, &CancellationToken::new()).await
}

async fn complete_streaming(
    p: &Arc<dyn ModelProvider>,
    req: CompletionRequest,
) -> (Result<Completion, ModelError>, Vec<StreamEvent>) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let r = p.complete(req, Some(&tx), &CancellationToken::new()).await;
    drop(tx);
    let mut events = Vec::new();
    while let Some(e) = rx.recv().await {
        events.push(e);
    }
    (r, events)
}

async fn request_bodies(server: &MockServer) -> Vec<Value> {
    server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// OpenAI-compatible
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn openai_non_streaming_text_with_bearer_key_and_usage() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(header("authorization", format!("Bearer {OPENAI_KEY}").as_str()))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "chatcmpl-1",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi!"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 2, "total_tokens": 14}
        })))
        .expect(1)
        .mount(&server)
        .await;
    let p = provider("openai-completions", &server, json!({}));
    let c = complete(&p, simple_request()).await.unwrap();
    assert_eq!(c.text(), "Hi!");
    assert_eq!(c.stop_reason(), StopReason::Stop);
    let u = c.usage();
    assert_eq!((u.input, u.output, u.total_tokens), (12, 2, 14));
    assert_eq!(c.message.api.as_deref(), Some("openai-completions"));
    assert_eq!(c.message.provider.as_deref(), Some("p"));
    assert_eq!(c.message.model.as_deref(), Some("test-model"));
    let stored = serde_json::to_value(c.into_agent_message()).unwrap();
    assert_eq!(stored["role"], "assistant");
    assert_eq!(stored["stopReason"], "stop");
    assert_eq!(stored["responseId"], "chatcmpl-1");
    let body = &request_bodies(&server).await[0];
    assert!(
        body.get("stream").is_none(),
        "non-streaming call must not ask for a stream: {body}"
    );
    // The key travels only in the header and never shows in Debug output.
    assert!(!format!("{p:?}").contains(OPENAI_KEY), "{p:?}");
}

#[tokio::test]
async fn openai_request_body_snapshot() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}]
        })))
        .mount(&server)
        .await;
    let p = provider("openai-completions", &server, json!({}));
    complete(&p, rich_request()).await.unwrap();
    insta::assert_json_snapshot!("openai_request_body", request_bodies(&server).await[0]);
}

#[tokio::test]
async fn openai_streaming_text_reports_deltas() {
    let server = MockServer::start().await;
    let body = sse(&[
        data(
            json!({"id": "c1", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
        ),
        data(json!({"id": "c1", "choices": [{"index": 0, "delta": {"content": "Hel"}}]})),
        data(json!({"id": "c1", "choices": [{"index": 0, "delta": {"content": "lo"}}]})),
        data(json!({"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})),
        data(
            json!({"id": "c1", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}}),
        ),
        "data: [DONE]".to_owned(),
    ]);
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(sse_response(body))
        .mount(&server)
        .await;
    let p = provider("openai-completions", &server, json!({}));
    let (c, events) = complete_streaming(&p, simple_request()).await;
    let c = c.unwrap();
    assert_eq!(c.text(), "Hello");
    assert_eq!(c.usage().total_tokens, 11);
    let deltas: Vec<&StreamEvent> = events
        .iter()
        .filter(|e| matches!(e, StreamEvent::TextDelta(_)))
        .collect();
    assert_eq!(
        deltas,
        vec![
            &StreamEvent::TextDelta("Hel".into()),
            &StreamEvent::TextDelta("lo".into())
        ]
    );
    assert!(matches!(
        events.last(),
        Some(StreamEvent::Done {
            stop_reason: StopReason::Stop,
            ..
        })
    ));
    let body = &request_bodies(&server).await[0];
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
}

#[tokio::test]
async fn openai_streamed_tool_calls_split_across_chunks() {
    let server = MockServer::start().await;
    let tc = |v: Value| data(json!({"choices": [{"index": 0, "delta": {"tool_calls": [v]}}]}));
    let body = sse(&[
        data(json!({"choices": [{"index": 0, "delta": {"content": "Checking."}}]})),
        tc(
            json!({"index": 0, "id": "call_a", "type": "function", "function": {"name": "read_file", "arguments": ""}}),
        ),
        tc(json!({"index": 0, "function": {"arguments": "{\"pa"}})),
        tc(
            json!({"index": 1, "id": "call_b", "type": "function", "function": {"name": "grep", "arguments": "{\"pattern\":"}}),
        ),
        tc(json!({"index": 0, "function": {"arguments": "th\": \"src/ma"}})),
        tc(json!({"index": 1, "function": {"arguments": " \"fn main\"}"}})),
        tc(json!({"index": 0, "function": {"arguments": "in.rs\"}"}})),
        data(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})),
        "data: [DONE]".to_owned(),
    ]);
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(sse_response(body))
        .mount(&server)
        .await;
    let p = provider("openai-completions", &server, json!({}));
    let (c, events) = complete_streaming(&p, rich_request()).await;
    let c = c.unwrap();
    assert_eq!(c.stop_reason(), StopReason::ToolUse);
    assert_eq!(c.text(), "Checking.");
    let calls = c.tool_calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(
        (calls[0].id.as_str(), calls[0].name.as_str()),
        ("call_a", "read_file")
    );
    assert_eq!(calls[0].arguments, json!({"path": "src/main.rs"}));
    assert_eq!(
        (calls[1].id.as_str(), calls[1].name.as_str()),
        ("call_b", "grep")
    );
    assert_eq!(calls[1].arguments, json!({"pattern": "fn main"}));
    let fragments: String = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCallDelta { index: 0, fragment } => Some(fragment.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(fragments, "{\"path\": \"src/main.rs\"}");
    assert!(events.contains(&StreamEvent::ToolCallStart {
        index: 1,
        id: "call_b".into(),
        name: "grep".into()
    }));
}

#[tokio::test]
async fn openai_429_then_success_is_retried_after_retry_after() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(429)
                .insert_header("retry-after", "1")
                .set_body_json(json!({"error": {"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded"}})),
        )
        .up_to_n_times(1)
        .expect(1)
        .mount(&server)
        .await;
    let ok = sse(&[
        data(
            json!({"choices": [{"index": 0, "delta": {"content": "finally"}, "finish_reason": "stop"}]}),
        ),
        "data: [DONE]".to_owned(),
    ]);
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(sse_response(ok))
        .expect(1)
        .mount(&server)
        .await;
    let p = provider("openai-completions", &server, json!({}));
    let started = Instant::now();
    let (c, events) = complete_streaming(&p, simple_request()).await;
    assert_eq!(c.unwrap().text(), "finally");
    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "Retry-After: 1 not honored: {:?}",
        started.elapsed()
    );
    assert!(
        matches!(&events[0], StreamEvent::Retry { attempt: 1, delay_ms: 1000, reason } if reason.contains("Rate limit reached")),
        "{events:?}"
    );
    assert_eq!(server.received_requests().await.unwrap().len(), 2);
}

/// A provider's absurd `Retry-After` (`1e20` seconds) panicked the turn in
/// `Duration::from_secs_f64`; it is clamped, not waited for, and the 429 goes back to the caller.
#[tokio::test]
async fn openai_429_with_a_huge_retry_after_is_an_error_not_a_panic() {
    for huge in ["1e20", "18446744073709551615"] {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/v1/chat/completions"))
            .respond_with(
                ResponseTemplate::new(429)
                    .insert_header("retry-after", huge)
                    .set_body_json(json!({"error": {"message": "slow down"}})),
            )
            .mount(&server)
            .await;
        let p = provider("openai-completions", &server, json!({}));
        let e = complete(&p, simple_request()).await.unwrap_err();
        assert!(
            matches!(&e, ModelError::RateLimited { retry_after: Some(d), .. } if *d == Duration::from_secs(86_400)),
            "{huge}: {e:?}"
        );
        assert_eq!(
            server.received_requests().await.unwrap().len(),
            1,
            "{huge}: a Retry-After past the policy's cap is not waited for"
        );
    }
}

#[tokio::test]
async fn openai_5xx_retries_are_bounded_then_unavailable() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(503)
                .set_body_json(json!({"error": {"message": "upstream overloaded, try later"}})),
        )
        .expect(3)
        .mount(&server)
        .await;
    let p = provider("openai-completions", &server, json!({"maxRetries": 2}));
    let e = complete(&p, simple_request()).await.unwrap_err();
    assert!(
        matches!(&e, ModelError::Unavailable { status: Some(503), timeout: false, message, .. } if message.contains("upstream overloaded")),
        "{e:?}"
    );
    assert_eq!(e.reason_code(), ReasonCode::ProviderUnavailable);
    assert_eq!(
        server.received_requests().await.unwrap().len(),
        3,
        "1 attempt + maxRetries 2"
    );
}

#[tokio::test]
async fn openai_context_overflow_is_classified_and_not_retried() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(400).set_body_json(json!({"error": {
            "message": "This model's maximum context length is 8192 tokens. However, your messages resulted in 9100 tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}})))
        .mount(&server)
        .await;
    let p = provider("openai-completions", &server, json!({}));
    let e = complete(&p, simple_request()).await.unwrap_err();
    assert!(
        matches!(&e, ModelError::ContextOverflow { observed_tokens: Some(9100), message, .. } if message.contains("maximum context length is 8192")),
        "{e:?}"
    );
    assert_eq!(e.reason_code(), ReasonCode::ContextOverflow);
    assert_eq!(server.received_requests().await.unwrap().len(), 1);
}

#[tokio::test]
async fn openai_auth_error_is_not_retried_and_keeps_provider_words() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(401).set_body_json(
            json!({"error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}}),
        ))
        .mount(&server)
        .await;
    let p = provider("openai-completions", &server, json!({}));
    let e = complete(&p, simple_request()).await.unwrap_err();
    assert!(
        matches!(&e, ModelError::Auth { status: 401, message, .. } if message == "Incorrect API key provided"),
        "{e:?}"
    );
    assert_eq!(server.received_requests().await.unwrap().len(), 1);
    assert!(!e.to_string().contains(OPENAI_KEY));
}

#[tokio::test]
async fn openai_garbage_body_is_bad_response_with_the_body() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(200).set_body_raw("<html>502 proxy hiccup</html>", "text/html"),
        )
        .mount(&server)
        .await;
    let p = provider("openai-completions", &server, json!({}));
    let e = complete(&p, simple_request()).await.unwrap_err();
    assert!(
        matches!(&e, ModelError::BadResponse { message, .. } if message.contains("<html>502 proxy hiccup</html>")),
        "{e:?}"
    );
    assert_eq!(
        server.received_requests().await.unwrap().len(),
        1,
        "a bad response is not retried"
    );
}

#[tokio::test]
async fn openai_stream_cut_midway_is_bad_response_with_partial_text() {
    let server = MockServer::start().await;
    let body = format!(
        "{}{}",
        sse(&[data(
            json!({"choices": [{"index": 0, "delta": {"content": "The answer is"}}]})
        )]),
        "data: {\"choices\": [{\"index\": 0, \"del"
    );
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(sse_response(body))
        .mount(&server)
        .await;
    let p = provider("openai-completions", &server, json!({}));
    let (r, events) = complete_streaming(&p, simple_request()).await;
    let e = r.unwrap_err();
    assert!(
        matches!(&e, ModelError::BadResponse { message, .. } if message.contains("The answer is")),
        "{e:?}"
    );
    assert_eq!(
        events,
        vec![StreamEvent::TextDelta("The answer is".into())],
        "no retry after text was shown"
    );
    assert_eq!(server.received_requests().await.unwrap().len(), 1);
}

#[tokio::test]
async fn openai_mid_stream_garbage_keeps_the_payload() {
    let server = MockServer::start().await;
    let body = sse(&["data: {this is not json".to_owned()]);
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(sse_response(body))
        .mount(&server)
        .await;
    let p = provider("openai-completions", &server, json!({}));
    let (r, _) = complete_streaming(&p, simple_request()).await;
    let e = r.unwrap_err();
    assert!(
        matches!(&e, ModelError::BadResponse { message, .. } if message.contains("{this is not json")),
        "{e:?}"
    );
}

#[tokio::test]
async fn timeout_is_unavailable_with_provider_timeout_reason() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_delay(Duration::from_secs(3))
                .set_body_json(json!({"choices": []})),
        )
        .mount(&server)
        .await;
    let p = provider(
        "openai-completions",
        &server,
        json!({"timeoutMs": 200, "maxRetries": 0}),
    );
    let started = Instant::now();
    let e = complete(&p, simple_request()).await.unwrap_err();
    assert!(
        matches!(e, ModelError::Unavailable { timeout: true, .. }),
        "{e:?}"
    );
    assert_eq!(e.reason_code(), ReasonCode::ProviderTimeout);
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn cancellation_aborts_promptly() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_delay(Duration::from_secs(5))
                .set_body_json(json!({})),
        )
        .mount(&server)
        .await;
    let p = provider("anthropic-messages", &server, json!({}));
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        c2.cancel();
    });
    let started = Instant::now();
    let e = p
        .complete(simple_request(), None, &cancel)
        .await
        .unwrap_err();
    assert_eq!(e, ModelError::Aborted);
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn unreachable_server_is_unavailable() {
    // Bind then drop a listener so the port is closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cfg = json!({"models": {"providers": {"dead": {"baseUrl": format!("http://127.0.0.1:{port}/v1"), "maxRetries": 0}}}});
    let (p, _) = ModelsConfig::from_config(&cfg, &env)
        .unwrap()
        .provider_for("dead/anything")
        .unwrap();
    let e = complete(&p, simple_request()).await.unwrap_err();
    assert!(
        matches!(
            e,
            ModelError::Unavailable {
                status: None,
                timeout: false,
                ..
            }
        ),
        "{e:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Anthropic
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn anthropic_non_streaming_tool_use_with_headers() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .and(header("x-api-key", ANTHROPIC_KEY))
        .and(header("anthropic-version", "2023-06-01"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "test-model",
            "content": [
                {"type": "text", "text": "I'll read it."},
                {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "src/main.rs"}}
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 30, "output_tokens": 12, "cache_read_input_tokens": 5}
        })))
        .expect(1)
        .mount(&server)
        .await;
    let p = provider("anthropic-messages", &server, json!({}));
    let c = complete(&p, rich_request()).await.unwrap();
    assert_eq!(c.stop_reason(), StopReason::ToolUse);
    assert_eq!(c.text(), "I'll read it.");
    assert_eq!(c.tool_calls()[0].arguments, json!({"path": "src/main.rs"}));
    let u = c.usage();
    assert_eq!(
        (u.input, u.output, u.cache_read, u.total_tokens),
        (30, 12, 5, 47)
    );
    assert_eq!(c.message.api.as_deref(), Some("anthropic-messages"));
    assert!(!format!("{p:?}").contains(ANTHROPIC_KEY), "{p:?}");
    insta::assert_json_snapshot!("anthropic_request_body", request_bodies(&server).await[0]);
}

#[tokio::test]
async fn anthropic_streaming_text_and_tool_input_json_delta() {
    let server = MockServer::start().await;
    let body = sse(&[
        anthropic_event(
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_2", "usage": {"input_tokens": 40, "output_tokens": 1}}}),
        ),
        anthropic_event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        anthropic_event("ping", json!({"type": "ping"})),
        anthropic_event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Look"}}),
        ),
        anthropic_event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ing."}}),
        ),
        anthropic_event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        anthropic_event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_9", "name": "grep", "input": {}}}),
        ),
        anthropic_event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"pat"}}),
        ),
        anthropic_event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "tern\": \"TODO\"}"}}),
        ),
        anthropic_event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 1}),
        ),
        anthropic_event(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 21}}),
        ),
        anthropic_event("message_stop", json!({"type": "message_stop"})),
    ]);
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(sse_response(body))
        .mount(&server)
        .await;
    let p = provider("anthropic-messages", &server, json!({}));
    let (c, events) = complete_streaming(&p, rich_request()).await;
    let c = c.unwrap();
    assert_eq!(c.text(), "Looking.");
    assert_eq!(c.stop_reason(), StopReason::ToolUse);
    assert_eq!(c.tool_calls()[0].id, "toolu_9");
    assert_eq!(c.tool_calls()[0].arguments, json!({"pattern": "TODO"}));
    assert_eq!((c.usage().input, c.usage().output), (40, 21));
    assert_eq!(c.message.extra.get("responseId"), Some(&json!("msg_2")));
    assert_eq!(events[0], StreamEvent::TextDelta("Look".into()));
    assert!(events.contains(&StreamEvent::ToolCallDelta {
        index: 0,
        fragment: "tern\": \"TODO\"}".into()
    }));
    assert_eq!(request_bodies(&server).await[0]["stream"], true);
}

#[tokio::test]
async fn anthropic_context_overflow_both_shapes() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(ResponseTemplate::new(400).set_body_json(json!({"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 212345 tokens > 200000 maximum"}})))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(ResponseTemplate::new(413).set_body_json(json!({"type": "error", "error": {"type": "request_too_large", "message": "Request exceeds the maximum allowed number of bytes."}})))
        .mount(&server)
        .await;
    let p = provider("anthropic-messages", &server, json!({}));
    let e = complete(&p, simple_request()).await.unwrap_err();
    assert!(
        matches!(&e, ModelError::ContextOverflow { observed_tokens: Some(212345), message, .. } if message.starts_with("prompt is too long")),
        "{e:?}"
    );
    let e = complete(&p, simple_request()).await.unwrap_err();
    assert!(
        matches!(&e, ModelError::ContextOverflow { observed_tokens: None, message, .. } if message.contains("maximum allowed number of bytes")),
        "{e:?}"
    );
    assert_eq!(
        server.received_requests().await.unwrap().len(),
        2,
        "overflow is never retried"
    );
}

#[tokio::test]
async fn anthropic_overloaded_then_ok_and_auth_failure() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(ResponseTemplate::new(529).set_body_json(json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn", "usage": {"input_tokens": 1, "output_tokens": 1}})))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(ResponseTemplate::new(401).set_body_json(json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}})))
        .mount(&server)
        .await;
    let p = provider("anthropic-messages", &server, json!({}));
    assert_eq!(complete(&p, simple_request()).await.unwrap().text(), "ok");
    let e = complete(&p, simple_request()).await.unwrap_err();
    assert!(
        matches!(&e, ModelError::Auth { status: 401, message, .. } if message == "invalid x-api-key"),
        "{e:?}"
    );
    assert_eq!(server.received_requests().await.unwrap().len(), 3);
}

#[tokio::test]
async fn anthropic_stream_cut_before_message_stop() {
    let server = MockServer::start().await;
    let body = sse(&[
        anthropic_event(
            "message_start",
            json!({"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 3}}}),
        ),
        anthropic_event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        anthropic_event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Partial thou"}}),
        ),
    ]);
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(sse_response(body))
        .mount(&server)
        .await;
    let p = provider("anthropic-messages", &server, json!({}));
    let (r, _) = complete_streaming(
        &p,
        CompletionRequest {
            max_output_tokens: None,
            ..simple_request()
        },
    )
    .await;
    let e = r.unwrap_err();
    assert!(
        matches!(&e, ModelError::BadResponse { message, .. } if message.contains("message_stop") && message.contains("Partial thou")),
        "{e:?}"
    );
    assert_eq!(
        request_bodies(&server).await[0]["max_tokens"],
        1024,
        "the model's configured maxTokens"
    );
}

#[tokio::test]
async fn anthropic_error_event_mid_stream_is_classified() {
    let server = MockServer::start().await;
    let body = sse(&[
        anthropic_event(
            "message_start",
            json!({"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 3}}}),
        ),
        anthropic_event(
            "error",
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ),
    ]);
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(sse_response(body))
        .expect(3)
        .mount(&server)
        .await;
    let p = provider("anthropic-messages", &server, json!({}));
    let (r, events) = complete_streaming(&p, simple_request()).await;
    let e = r.unwrap_err();
    assert!(
        matches!(&e, ModelError::Unavailable { message, .. } if message == "Overloaded"),
        "{e:?}"
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, StreamEvent::Retry { .. }))
            .count(),
        2,
        "retried: nothing was shown yet"
    );
}

// ---------------------------------------------------------------------------------------------
// Scripted provider
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn scripted_provider_from_file_with_tool_calls_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.jsonl");
    std::fs::write(
        &script,
        [
            r#""plain text reply""#,
            r#"{"content": "Reading.", "toolCalls": [{"id": "t1", "name": "read_file", "arguments": {"path": "a.rs"}}, {"name": "ls"}], "usage": {"input": 100, "output": 7, "totalTokens": 107}}"#,
            "",
            r#"{"error": {"kind": "context_overflow", "message": "prompt is too long", "observedTokens": 9999}}"#,
            r#"{"error": {"kind": "rate_limited", "message": "slow down", "retryAfterMs": 1500}}"#,
        ]
        .join("
"),
    )
    .unwrap();
    let cfg = json!({"models": {"providers": {"demo": {"api": "scripted", "script": script.to_string_lossy()}}}});
    let (p, _) = ModelsConfig::from_config(&cfg, &env)
        .unwrap()
        .provider_for("demo/any-model")
        .unwrap();
    let first = complete(&p, simple_request()).await.unwrap();
    assert_eq!(first.text(), "plain text reply");
    assert_eq!(first.message.provider.as_deref(), Some("scripted"));
    assert!(first.usage().input > 0 && first.usage().output > 0);
    let (second, events) = complete_streaming(&p, simple_request()).await;
    let second = second.unwrap();
    assert_eq!(second.stop_reason(), StopReason::ToolUse);
    assert_eq!(second.usage().total_tokens, 107);
    let calls = second.tool_calls();
    assert_eq!(
        (calls[0].id.as_str(), calls[1].id.as_str()),
        ("t1", "call_2_1")
    );
    assert!(events.contains(&StreamEvent::TextDelta("Reading.".into())));
    let e = complete(&p, simple_request()).await.unwrap_err();
    assert!(
        matches!(
            e,
            ModelError::ContextOverflow {
                observed_tokens: Some(9999),
                ..
            }
        ),
        "{e:?}"
    );
    let e = complete(&p, simple_request()).await.unwrap_err();
    assert!(
        matches!(e, ModelError::RateLimited { retry_after: Some(d), .. } if d == Duration::from_millis(1500)),
        "{e:?}"
    );
    let e = complete(&p, simple_request()).await.unwrap_err();
    assert!(e.to_string().contains("script exhausted: all 4"), "{e}");
}

#[test]
fn scripted_file_errors_name_the_config_key_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("bad.jsonl");
    std::fs::write(&script, "\"ok\"\n{\"content\": 5}\n").unwrap();
    let cfg = json!({"models": {"providers": {"demo": {"api": "scripted", "script": script.to_string_lossy()}}}});
    let e = ModelsConfig::from_config(&cfg, &env)
        .unwrap()
        .provider_for("demo/m")
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("models.providers.demo.script") && e.contains("line 2"),
        "{e}"
    );
}

// ---------------------------------------------------------------------------------------------
// LLM summarizer
// ---------------------------------------------------------------------------------------------

fn summary_request(previous: Option<&str>) -> SummaryRequest {
    SummaryRequest {
        kind: SummaryKind::History,
        conversation: "[User]: rename parse_config in src/config.rs\n\n[Tool error bash]: error[E0425]: cannot find function `parse_config`".into(),
        previous_summary: previous.map(str::to_owned),
        custom_instructions: Some("keep error codes".into()),
        max_tokens: 400,
    }
}

const GOOD_SUMMARY: &str = "## Goal\nRename parse_config.\n\n## Critical Context\n- error[E0425]";

#[tokio::test]
async fn llm_summarizer_prompts_in_update_mode_and_returns_summary() {
    let scripted = Arc::new(ScriptedProvider::from_texts([GOOD_SUMMARY]));
    let s = LlmSummarizer::new(scripted.clone(), "sum-model");
    assert_eq!(s.name(), "scripted:sum-model");
    let summary = s
        .summarize(summary_request(Some(
            "## Goal\nOld goal: split src/config.rs",
        )))
        .await
        .unwrap();
    assert_eq!(summary.text, GOOD_SUMMARY);
    assert_eq!(
        summary.output_tokens,
        clawctx_tokens::text_tokens(GOOD_SUMMARY)
    );
    let sent = &scripted.requests()[0];
    assert_eq!(sent.model, "sum-model");
    assert_eq!(sent.max_output_tokens, Some(400));
    assert!(sent.tools.is_empty());
    let prompt = sent.messages[0].plain_text();
    assert!(
        prompt.contains("<conversation>\n[User]: rename parse_config in src/config.rs"),
        "{prompt}"
    );
    assert!(prompt.contains("</conversation>"));
    assert!(
        prompt.contains(
            "<previous-summary>\n## Goal\nOld goal: split src/config.rs\n</previous-summary>"
        ),
        "{prompt}"
    );
    assert!(prompt.contains(clawctx_model::summarizer::UPDATE_PROMPT.trim()));
    assert!(prompt.contains("Additional focus: keep error codes"));
    assert!(sent
        .system_prompt
        .as_deref()
        .unwrap_or_default()
        .contains("not a conversation you are part of"));
}

/// A lossless leaf summary of a chat span with a name, a number and a date: what reaches the
/// model holds the span and the instruction to keep those facts, and the model's summary comes
/// back as written.
#[tokio::test]
async fn llm_leaf_summary_asks_the_model_to_keep_names_numbers_and_dates() {
    let reply = "- Caroline adopted Pixel, a 3-year-old tabby, on 7 May 2023 (shelter in Tacoma).";
    let scripted = Arc::new(ScriptedProvider::from_texts([reply]));
    let s = LlmSummarizer::new(scripted.clone(), "sum-model");
    let span = "[User]: Caroline: I adopted Pixel, a 3-year-old tabby, on 7 May 2023.\n\n[User]: Melanie: So you decided on the shelter in Tacoma!";
    let summary = s
        .summarize(SummaryRequest {
            kind: SummaryKind::Leaf,
            conversation: span.into(),
            previous_summary: None,
            custom_instructions: None,
            max_tokens: 200,
        })
        .await
        .unwrap();
    assert_eq!(summary.text, reply);
    let prompt = scripted.requests()[0].messages[0].plain_text();
    assert!(prompt.contains(span), "{prompt}");
    let instructions = prompt
        .rsplit("</conversation>")
        .next()
        .unwrap_or_default()
        .to_lowercase();
    for word in [
        "names of people",
        "numbers",
        "dates",
        "decided",
        "exactly as written",
    ] {
        assert!(instructions.contains(word), "`{word}` in:\n{instructions}");
    }
}

#[tokio::test]
async fn llm_summarizer_never_asks_for_more_than_the_model_can_write() {
    let scripted = Arc::new(ScriptedProvider::from_texts([GOOD_SUMMARY, GOOD_SUMMARY]));
    let capped = LlmSummarizer::new(scripted.clone(), "m").with_max_output_tokens(128);
    capped.summarize(summary_request(None)).await.unwrap();
    let roomy = LlmSummarizer::new(scripted.clone(), "m").with_max_output_tokens(4_096);
    roomy.summarize(summary_request(None)).await.unwrap();
    let sent: Vec<Option<u64>> = scripted
        .requests()
        .iter()
        .map(|r| r.max_output_tokens)
        .collect();
    assert_eq!(
        sent,
        [Some(128), Some(400)],
        "the request's 400 tokens must be capped at the model's 128, and left alone under 4096"
    );
}

#[tokio::test]
async fn llm_summarizer_rejects_error_stop_reason_reasoning_only_and_empty() {
    let scripted = Arc::new(ScriptedProvider::new(
        vec![
            ScriptedReply::from_json(
                &json!({"content": "", "stopReason": "error", "errorMessage": "upstream exploded"}),
            )
            .unwrap(),
            ScriptedReply::from_json(&json!({"thinking": "Let me think about the summary..."}))
                .unwrap(),
            ScriptedReply::text("   "),
        ],
        Exhaustion::Error,
    ));
    let s = LlmSummarizer::new(scripted, "m");
    let e = s.summarize(summary_request(None)).await.unwrap_err();
    assert!(
        matches!(&e, SummarizeError::Failed(m) if m.contains("upstream exploded")),
        "{e:?}"
    );
    assert!(e.to_string().starts_with("Summarization failed: "));
    let e = s.summarize(summary_request(None)).await.unwrap_err();
    assert!(
        matches!(&e, SummarizeError::Failed(m) if m.contains("only reasoning")),
        "{e:?}"
    );
    let e = s.summarize(summary_request(None)).await.unwrap_err();
    assert!(
        matches!(&e, SummarizeError::Failed(m) if m.contains("empty")),
        "{e:?}"
    );
}

#[tokio::test]
async fn llm_summarizer_over_http_maps_auth_errors() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(403).set_body_json(json!({"error": {"message": "key revoked"}})),
        )
        .mount(&server)
        .await;
    let s = LlmSummarizer::new(
        provider("openai-completions", &server, json!({})),
        "test-model",
    );
    let e = s.summarize(summary_request(None)).await.unwrap_err();
    assert!(
        matches!(&e, SummarizeError::Auth(m) if m.contains("key revoked")),
        "{e:?}"
    );
}

#[tokio::test]
async fn spend_guard_refuses_with_budget_exhausted_per_session() {
    let scripted = Arc::new(ScriptedProvider::new(
        vec![ScriptedReply::from_json(
            &json!({"content": GOOD_SUMMARY, "usage": {"input": 900, "output": 100}}),
        )
        .unwrap()],
        Exhaustion::Cycle,
    ));
    // The guard checks the prompt estimate plus max output before calling. Size the budget so
    // that exactly two calls fit: 1000 recorded for the first, then estimate + 400 for the second.
    let prompt = clawctx_model::summary_prompt(&summary_request(None));
    let estimate = clawctx_tokens::text_tokens(&prompt.system)
        + clawctx_tokens::text_tokens(&prompt.user)
        + 400;
    let guard = Arc::new(SpendGuard::new(1000 + estimate, Duration::from_secs(3600)));
    let s = LlmSummarizer::new(scripted.clone(), "m").with_spend_guard(guard.clone());
    let a = s.for_session("agent:main:a");
    a.summarize(summary_request(None)).await.unwrap();
    assert_eq!(guard.spent("agent:main:a"), 1000);
    a.summarize(summary_request(None))
        .await
        .unwrap_or_else(|e| panic!("second call should still fit: {e}"));
    let e = a.summarize(summary_request(None)).await.unwrap_err();
    assert!(
        matches!(&e, SummarizeError::BudgetExhausted(m) if m.contains("agent:main:a")),
        "{e:?}"
    );
    assert_eq!(
        scripted.served(),
        2,
        "a refused call never reaches the provider"
    );
    s.for_session("agent:main:b")
        .summarize(summary_request(None))
        .await
        .unwrap();
}

#[tokio::test]
async fn breaker_opens_after_failures_and_stays_open_across_restart() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state").join("summarizer-breaker.json");
    let failing = || {
        Arc::new(ScriptedProvider::new(
            vec![ScriptedReply::from_json(
                &json!({"error": {"kind": "unavailable", "message": "503 from upstream"}}),
            )
            .unwrap()],
            Exhaustion::Cycle,
        ))
    };
    let provider = failing();
    let breaker = Arc::new(CircuitBreaker::with_state_file(
        3,
        Duration::from_secs(600),
        &state,
    ));
    let s = LlmSummarizer::new(provider.clone(), "m").with_circuit_breaker(breaker.clone());
    for _ in 0..3 {
        let e = s.summarize(summary_request(None)).await.unwrap_err();
        assert!(
            matches!(&e, SummarizeError::Unavailable(m) if m.contains("503 from upstream")),
            "{e:?}"
        );
    }
    assert_eq!(breaker.snapshot().state, BreakerState::Open);
    let e = s.summarize(summary_request(None)).await.unwrap_err();
    assert!(
        matches!(&e, SummarizeError::Unavailable(m) if m.contains("circuit breaker open")),
        "{e:?}"
    );
    assert_eq!(
        provider.served(),
        3,
        "an open breaker does not call the provider"
    );

    // "Restart": a new breaker and a new summarizer load the state file.
    let persisted: Value = serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    assert_eq!(persisted["state"], "open");
    assert_eq!(persisted["consecutiveFailures"], 3);
    let provider2 = Arc::new(ScriptedProvider::from_texts([GOOD_SUMMARY]));
    let breaker2 = Arc::new(CircuitBreaker::with_state_file(
        3,
        Duration::from_secs(600),
        &state,
    ));
    assert_eq!(breaker2.snapshot().state, BreakerState::Open);
    let s2 = LlmSummarizer::new(provider2.clone(), "m").with_circuit_breaker(breaker2);
    let e = s2.summarize(summary_request(None)).await.unwrap_err();
    assert!(
        matches!(&e, SummarizeError::Unavailable(m) if m.contains("circuit breaker open")),
        "{e:?}"
    );
    assert_eq!(provider2.served(), 0);

    // After the cooldown a probe goes through and a success closes the breaker (and the file).
    let breaker3 = Arc::new(CircuitBreaker::with_state_file(
        3,
        Duration::from_millis(0),
        &state,
    ));
    let s3 = LlmSummarizer::new(provider2.clone(), "m").with_circuit_breaker(breaker3.clone());
    s3.summarize(summary_request(None)).await.unwrap();
    assert_eq!(breaker3.snapshot().state, BreakerState::Closed);
    let persisted: Value = serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    assert_eq!(persisted["state"], "closed");
    let leftovers: Vec<_> = std::fs::read_dir(state.parent().unwrap())
        .unwrap()
        .collect();
    assert_eq!(leftovers.len(), 1, "no temp files left behind");
}

/// A provider built from config the way the host does, pointed at a loopback mock of
/// `clawctx_test_support::mock_model` (no key).
fn mock_provider(api: &str, base_url: &str, extra: Value) -> Arc<dyn ModelProvider> {
    let mut p = json!({
        "api": api, "baseUrl": base_url,
        "models": [{"id": "test-model", "contextWindow": 32000, "maxTokens": 256}],
        "maxRetries": 0, "timeoutMs": 5000
    });
    if let (Some(p), Some(extra)) = (p.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            p.insert(k.clone(), v.clone());
        }
    }
    let cfg = ModelsConfig::from_config(&json!({"models": {"providers": {"p": p}}}), &env).unwrap();
    cfg.provider_for("p/test-model").unwrap().0
}

/// A system prompt of more than 1,024 tokens, the shortest prefix either provider caches.
fn long_system_prompt() -> String {
    let mut s = String::from("You are a careful assistant.\n");
    for i in 0..300 {
        s.push_str(&format!("Rule {i}: answer briefly. "));
    }
    s
}

/// The `cache_control` breakpoints of an Anthropic body: in the system blocks, the tools and
/// the messages' blocks, as (where, text) pairs.
fn breakpoints(body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for b in body["system"].as_array().into_iter().flatten() {
        if b.get("cache_control").is_some() {
            out.push("system".to_owned());
        }
    }
    for turn in body["messages"].as_array().unwrap() {
        for b in turn["content"].as_array().unwrap() {
            if b.get("cache_control").is_some() {
                out.push(b["text"].as_str().unwrap_or("(non-text)").to_owned());
            }
        }
    }
    out
}

#[tokio::test]
async fn anthropic_requests_carry_breakpoints_and_read_the_cache_back() {
    use clawctx_test_support::mock_model::MockAnthropic;
    let mock = MockAnthropic::start().await;
    let p = mock_provider("anthropic-messages", &mock.base_url, json!({}));
    let system = long_system_prompt();
    let recalled = "<recalled note=\"quoted\">\n[msg_1 user] question 0\n</recalled>";
    let mut history: Vec<AgentMessage> = Vec::new();
    let mut usages = Vec::new();
    for t in 0..6 {
        let prompt = format!("question {t}: what did we decide about the deploy on day {t}?");
        history.push(AgentMessage::user(prompt.clone()));
        let mut messages = history.clone();
        if t % 2 == 1 {
            // The lossless engine's per-prompt block, right before the prompt.
            messages.insert(messages.len() - 1, AgentMessage::user(recalled));
        }
        let request = CompletionRequest {
            model: "test-model".into(),
            system_prompt: Some(system.clone()),
            messages,
            max_output_tokens: Some(64),
            ..Default::default()
        };
        // The last turn streams: the usage then comes from `message_start`.
        let c = if t == 5 {
            let (c, _) = complete_streaming(&p, request).await;
            c.unwrap()
        } else {
            complete(&p, request).await.unwrap()
        };
        usages.push(c.usage());
        history.push(AgentMessage::assistant(c.text()));
    }
    let bodies = mock.requests();
    assert_eq!(bodies.len(), 6);
    for (t, body) in bodies.iter().enumerate() {
        let marks = breakpoints(body);
        assert!(marks.len() <= 4, "turn {t}: {marks:?}");
        assert_eq!(marks[0], "system", "turn {t}: {body}");
        // The prompt (the end of the request) carries one.
        assert!(
            marks.last().unwrap().starts_with(&format!("question {t}:")),
            "turn {t}: {marks:?}"
        );
        if t > 0 {
            // So does the end of the stable history: the previous answer, before the recalled
            // block and the prompt.
            assert!(
                marks.iter().any(|m| m.starts_with("Noted (reply")),
                "turn {t}: {marks:?}"
            );
            assert!(
                !marks.iter().any(|m| m.starts_with("<recalled")),
                "turn {t}: {marks:?}"
            );
        }
    }
    // Read into the usage: the first request writes the system prompt and its turn, each later
    // one reads what the one before wrote, a little more every turn.
    assert_eq!(usages[0].cache_read, 0, "{usages:?}");
    assert!(usages[0].cache_write >= 1_024, "{usages:?}");
    for t in 1..6 {
        assert!(usages[t].cache_read >= 1_024, "turn {t}: {usages:?}");
        assert!(usages[t].cache_write > 0, "turn {t}: {usages:?}");
        if t > 1 {
            assert!(
                usages[t].cache_read > usages[t - 1].cache_read,
                "turn {t}: {usages:?}"
            );
        }
    }
    let totals = mock.totals();
    assert!(totals.cached_share() > 0.8, "{totals:?}");
}

#[tokio::test]
async fn openai_requests_carry_a_stable_prompt_cache_key_per_session() {
    use clawctx_test_support::mock_model::MockModel;
    let mock = MockModel::start().await;
    let p = mock_provider("openai-completions", &mock.base_url, json!({}));
    let system = long_system_prompt();
    let mut usages = Vec::new();
    for session in ["agent:main:alice", "agent:main:bob"] {
        let mut history: Vec<AgentMessage> = Vec::new();
        for t in 0..3 {
            history.push(AgentMessage::user(format!("question {t} of this session")));
            let c = complete(
                &p,
                CompletionRequest {
                    model: "test-model".into(),
                    system_prompt: Some(system.clone()),
                    messages: history.clone(),
                    cache_key: Some(clawctx_model::prompt_cache_key(session)),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
            usages.push(c.usage());
            history.push(AgentMessage::assistant(c.text()));
        }
    }
    let keys: Vec<String> = mock
        .requests()
        .iter()
        .map(|b| {
            b["prompt_cache_key"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(keys.len(), 6);
    assert!(
        keys[0].starts_with("clawctx-") && keys[0].len() == 40,
        "{keys:?}"
    );
    assert!(keys[..3].iter().all(|k| *k == keys[0]), "{keys:?}");
    assert!(keys[3..].iter().all(|k| *k == keys[3]), "{keys:?}");
    assert_ne!(keys[0], keys[3]);
    assert!(!keys
        .iter()
        .any(|k| k.contains("alice") || k.contains("bob")));
    // Each session's first request misses (the mock routes by the key, as OpenAI does), its
    // follow-ups read the cache, in 128-token steps.
    for (i, u) in usages.iter().enumerate() {
        if i % 3 == 0 {
            assert_eq!(u.cache_read, 0, "request {i}: {usages:?}");
        } else {
            assert!(u.cache_read >= 1_024, "request {i}: {usages:?}");
            assert_eq!(u.cache_read % 128, 0, "request {i}: {usages:?}");
        }
    }

    // A compatible server that rejects unknown fields: `promptCacheKey: false`.
    let quiet = mock_provider(
        "openai-completions",
        &mock.base_url,
        json!({"promptCacheKey": false}),
    );
    complete(
        &quiet,
        CompletionRequest {
            model: "test-model".into(),
            messages: vec![AgentMessage::user("hi")],
            cache_key: Some("clawctx-x".into()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(mock
        .requests()
        .last()
        .unwrap()
        .get("prompt_cache_key")
        .is_none());
}
