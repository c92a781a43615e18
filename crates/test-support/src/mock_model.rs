//! Mock model providers that report prompt caching the way the real ones do, on loopback:
//! [`MockModel`] speaks OpenAI Chat Completions and answers
//! `usage.prompt_tokens_details.cached_tokens` under OpenAI's rule; [`MockAnthropic`] speaks
//! Anthropic Messages (`POST /v1/messages`, plain or streamed) and answers
//! `cache_read_input_tokens` / `cache_creation_input_tokens` under Anthropic's rule, from the
//! `cache_control` breakpoints of each request. Both record the request bodies. The figures
//! come from [`PrefixCache`] (`clawctx_model::prefix_cache`, which explains the rules;
//! re-exported here), on the wall clock.
//!
//! A request's session is its `prompt_cache_key` when it has one, else its `user` (OpenAI) or
//! `metadata.user_id` (Anthropic), else the text of its first non-system message
//! ([`session_of`]).

use std::sync::{Arc, Mutex};

pub use clawctx_model::prefix_cache::{
    anthropic_blocks, openai_blocks, serialize_parts, session_of, Block, CacheRule, CacheTotals,
    CacheUsage, PrefixCache, KEEP_REQUESTS, MIN_CACHED_TOKENS,
};
use serde_json::{json, Value};

/// The state both mocks share with their handler.
#[derive(Clone)]
struct Recorder {
    cache: Arc<Mutex<PrefixCache>>,
    requests: Arc<Mutex<Vec<Value>>>,
}

impl Recorder {
    fn new(rule: CacheRule) -> Self {
        Recorder {
            cache: Arc::new(Mutex::new(PrefixCache::with_rule(rule))),
            requests: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Records `body`, answers its cache figures and its number (1 = the first).
    fn observe(&self, body: Value, blocks: &[Block]) -> (CacheUsage, usize) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let usage = self
            .cache
            .lock()
            .unwrap()
            .observe_at(&session_of(&body), now, blocks);
        let mut r = self.requests.lock().unwrap();
        r.push(body);
        (usage, r.len())
    }
}

/// A server on loopback that stops when its handle is dropped.
struct Server {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Server {
    async fn start(app: axum::Router) -> (Self, std::net::SocketAddr) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the mock model on loopback");
        let addr = listener.local_addr().expect("mock model address");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await
                .expect("the mock model serves");
        });
        (Server { stop: Some(stop) }, addr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// An OpenAI-compatible `POST /v1/chat/completions` server on loopback that answers every
/// request at once with a short reply and a usage carrying
/// `prompt_tokens_details.cached_tokens` under OpenAI's caching rule. Stops when dropped.
pub struct MockModel {
    /// `http://127.0.0.1:PORT/v1`, the base URL a provider config takes.
    pub base_url: String,
    recorder: Recorder,
    _server: Server,
}

impl MockModel {
    /// Starts the server on the current Tokio runtime.
    pub async fn start() -> Self {
        let recorder = Recorder::new(CacheRule::openai());
        let r = recorder.clone();
        let app = axum::Router::new().route(
            "/v1/chat/completions",
            axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
                let r = r.clone();
                async move { axum::Json(answer_openai(&r, body)) }
            }),
        );
        let (server, addr) = Server::start(app).await;
        Self {
            base_url: format!("http://{addr}/v1"),
            recorder,
            _server: server,
        }
    }

    /// Totals over every request answered so far.
    pub fn totals(&self) -> CacheTotals {
        self.recorder.cache.lock().unwrap().totals()
    }

    /// The request bodies answered so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.recorder.requests.lock().unwrap().clone()
    }
}

fn answer_openai(r: &Recorder, body: Value) -> Value {
    let blocks = openai_blocks(&body);
    let (usage, n) = r.observe(body, &blocks);
    let reply = format!("Noted (reply {n}).");
    json!({
        "id": format!("chatcmpl-mock-{n}"),
        "object": "chat.completion",
        "created": 0,
        "model": "mock",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": reply},
            "finish_reason": "stop"
        }],
        "usage": {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": 5,
            "total_tokens": usage.prompt_tokens + 5,
            "prompt_tokens_details": {"cached_tokens": usage.cached_tokens}
        }
    })
}

/// An Anthropic Messages `POST /v1/messages` server on loopback that answers every request at
/// once with a short reply (an SSE stream when the request asks for one) and a usage carrying
/// `cache_read_input_tokens` and `cache_creation_input_tokens` under Anthropic's caching rule,
/// from the request's `cache_control` breakpoints. Stops when dropped.
pub struct MockAnthropic {
    /// `http://127.0.0.1:PORT`, the base URL a provider config takes (without `/v1`).
    pub base_url: String,
    recorder: Recorder,
    _server: Server,
}

impl MockAnthropic {
    /// Starts the server on the current Tokio runtime.
    pub async fn start() -> Self {
        let recorder = Recorder::new(CacheRule::anthropic());
        let r = recorder.clone();
        let app = axum::Router::new().route(
            "/v1/messages",
            axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
                let r = r.clone();
                async move { answer_anthropic(&r, body) }
            }),
        );
        let (server, addr) = Server::start(app).await;
        Self {
            base_url: format!("http://{addr}"),
            recorder,
            _server: server,
        }
    }

    /// Totals over every request answered so far.
    pub fn totals(&self) -> CacheTotals {
        self.recorder.cache.lock().unwrap().totals()
    }

    /// The request bodies answered so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.recorder.requests.lock().unwrap().clone()
    }
}

fn answer_anthropic(r: &Recorder, body: Value) -> axum::response::Response {
    use axum::response::IntoResponse;
    let stream = body.get("stream").and_then(Value::as_bool) == Some(true);
    let blocks = anthropic_blocks(&body);
    let (u, n) = r.observe(body, &blocks);
    let reply = format!("Noted (reply {n}).");
    let usage = json!({
        "input_tokens": u.prompt_tokens - u.cached_tokens - u.written_tokens,
        "cache_read_input_tokens": u.cached_tokens,
        "cache_creation_input_tokens": u.written_tokens,
        "output_tokens": 5
    });
    let id = format!("msg_mock_{n}");
    if !stream {
        return axum::Json(json!({
            "id": id, "type": "message", "role": "assistant", "model": "mock",
            "content": [{"type": "text", "text": reply}],
            "stop_reason": "end_turn",
            "usage": usage
        }))
        .into_response();
    }
    let events = [
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": id, "type": "message", "role": "assistant", "model": "mock", "content": [], "usage": usage}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": reply}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 5}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ];
    let text: String = events
        .iter()
        .map(|(event, data)| format!("event: {event}\ndata: {data}\n\n"))
        .collect();
    ([("content-type", "text/event-stream")], text).into_response()
}
