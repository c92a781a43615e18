//! A mock model that reports prefix caching the way providers do: an OpenAI-compatible server
//! on loopback ([`MockModel`]) whose usage carries `prompt_tokens_details.cached_tokens` from
//! [`PrefixCache`] (`clawctx_model::prefix_cache`, which explains the figure; re-exported here).
//!
//! A request's session is its `user` field when it has one, else the text of its first
//! non-system message (a conversation's opening message identifies it until that message
//! leaves the context, which is a cache break anyway).

use std::sync::{Arc, Mutex};

pub use clawctx_model::prefix_cache::{
    serialize_parts, CacheTotals, CacheUsage, PrefixCache, BYTES_PER_TOKEN, KEEP_REQUESTS,
};
use serde_json::{json, Value};

/// An OpenAI-compatible `POST /v1/chat/completions` server on loopback that answers every
/// request at once with a short reply and a usage carrying
/// `prompt_tokens_details.cached_tokens` from a [`PrefixCache`]. Stops when dropped.
pub struct MockModel {
    /// `http://127.0.0.1:PORT/v1`, the base URL a provider config takes.
    pub base_url: String,
    cache: Arc<Mutex<PrefixCache>>,
    requests: Arc<Mutex<Vec<Value>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl MockModel {
    /// Starts the server on the current Tokio runtime.
    pub async fn start() -> Self {
        let cache = Arc::new(Mutex::new(PrefixCache::new()));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the mock model on loopback");
        let addr = listener.local_addr().expect("mock model address");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (c, r) = (cache.clone(), requests.clone());
        let app = axum::Router::new().route(
            "/v1/chat/completions",
            axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
                let (c, r) = (c.clone(), r.clone());
                async move { axum::Json(answer(&c, &r, body)) }
            }),
        );
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await
                .expect("the mock model serves");
        });
        Self {
            base_url: format!("http://{addr}/v1"),
            cache,
            requests,
            stop: Some(stop),
        }
    }

    /// Totals over every request answered so far.
    pub fn totals(&self) -> CacheTotals {
        self.cache.lock().unwrap().totals()
    }

    /// The request bodies answered so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for MockModel {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The session a request belongs to (see the module docs).
pub fn session_of(body: &Value) -> String {
    if let Some(user) = body.get("user").and_then(Value::as_str) {
        return user.to_owned();
    }
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    messages
        .iter()
        .find(|m| m.get("role").and_then(Value::as_str) != Some("system"))
        .map(|m| m.get("content").map(Value::to_string).unwrap_or_default())
        .unwrap_or_default()
}

fn answer(cache: &Mutex<PrefixCache>, requests: &Mutex<Vec<Value>>, body: Value) -> Value {
    let parts: Vec<String> = body
        .get("messages")
        .and_then(Value::as_array)
        .map(|ms| ms.iter().map(Value::to_string).collect())
        .unwrap_or_default();
    let usage = cache.lock().unwrap().observe(&session_of(&body), &parts);
    let n = {
        let mut r = requests.lock().unwrap();
        r.push(body);
        r.len()
    };
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
