//! A mock model that reports prefix caching the way providers do, so tests and benches can
//! measure whether a context engine keeps the provider's prompt cache warm.
//!
//! Providers cache the longest unchanged prefix of a prompt and report it in the usage
//! (OpenAI `usage.prompt_tokens_details.cached_tokens`, Anthropic `cache_read_input_tokens`).
//! [`PrefixCache`] computes the same figure offline: a request is its messages serialized (one
//! JSON object per message, the system prompt first, `\n` between them), and its cached tokens
//! are the tokens of the longest byte prefix it shares with an earlier request of the same
//! session. Tokens are estimated as 4 bytes each (rounded up for the prompt, down for the cached
//! part), the usual rule of thumb; the figure compares engines, it does not bill anyone.
//!
//! A session is whatever the caller names: [`MockModel`] (an OpenAI-compatible server on
//! loopback) uses the request's `user` field when it has one, else the text of its first
//! non-system message (a conversation's opening message identifies it for its life).
//! Only the session's last [`KEEP_REQUESTS`] requests are compared (a provider's cache also
//! forgets).
//!
//! A *cache break* is a request that shares less than half of the previous request of its
//! session: the front of the prompt changed, so most of it is paid for again (a request that
//! only drops the previous turn's per-turn tail, e.g. a recalled block before the prompt, is
//! not a break).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

/// Earlier requests of one session a new request is compared with.
pub const KEEP_REQUESTS: usize = 16;

/// Bytes per estimated token.
pub const BYTES_PER_TOKEN: usize = 4;

/// The cache figures of one request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheUsage {
    /// Estimated tokens of the whole request.
    pub prompt_tokens: u64,
    /// Estimated tokens of its longest prefix shared with an earlier request of the session.
    pub cached_tokens: u64,
    /// Whether it shares less than half of the session's previous request.
    pub broke: bool,
}

/// Totals over the requests seen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheTotals {
    /// Requests seen (the first of each session included).
    pub requests: u64,
    /// Requests after the first of their session (those that could hit the cache).
    pub follow_ups: u64,
    /// Prompt tokens of the follow-ups.
    pub prompt_tokens: u64,
    /// Cached tokens of the follow-ups.
    pub cached_tokens: u64,
    /// Follow-ups that broke the cache.
    pub breaks: u64,
}

impl CacheTotals {
    /// Cached share of the follow-ups' prompt tokens (0 when there were none).
    pub fn cached_share(&self) -> f64 {
        if self.prompt_tokens == 0 {
            return 0.0;
        }
        self.cached_tokens as f64 / self.prompt_tokens as f64
    }

    /// Cache breaks per 100 follow-up requests.
    pub fn breaks_per_100(&self) -> f64 {
        if self.follow_ups == 0 {
            return 0.0;
        }
        self.breaks as f64 * 100.0 / self.follow_ups as f64
    }
}

/// The provider-side prefix cache (see the module docs).
#[derive(Debug, Default)]
pub struct PrefixCache {
    sessions: HashMap<String, VecDeque<String>>,
    totals: CacheTotals,
}

/// The serialized form of a request: `parts` (one per message) joined by `\n`.
pub fn serialize_parts<S: AsRef<str>>(parts: &[S]) -> String {
    let mut out = String::new();
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(p.as_ref());
    }
    out
}

fn common_prefix(a: &str, b: &str) -> usize {
    a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count()
}

impl PrefixCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a request of `session` whose messages serialize to `parts` and answers its
    /// cache figures.
    pub fn observe<S: AsRef<str>>(&mut self, session: &str, parts: &[S]) -> CacheUsage {
        let text = serialize_parts(parts);
        let earlier = self.sessions.entry(session.to_owned()).or_default();
        let shared = earlier
            .iter()
            .map(|e| common_prefix(e, &text))
            .max()
            .unwrap_or(0);
        let prompt_tokens = text.len().div_ceil(BYTES_PER_TOKEN) as u64;
        let cached_tokens = (shared / BYTES_PER_TOKEN) as u64;
        let broke = earlier
            .back()
            .is_some_and(|prev| common_prefix(prev, &text) * 2 < prev.len());
        let follow_up = !earlier.is_empty();
        earlier.push_back(text);
        if earlier.len() > KEEP_REQUESTS {
            earlier.pop_front();
        }
        self.totals.requests += 1;
        if follow_up {
            self.totals.follow_ups += 1;
            self.totals.prompt_tokens += prompt_tokens;
            self.totals.cached_tokens += cached_tokens;
            self.totals.breaks += u64::from(broke);
        }
        CacheUsage {
            prompt_tokens,
            cached_tokens,
            broke,
        }
    }

    /// Totals so far.
    pub fn totals(&self) -> CacheTotals {
        self.totals
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_tokens_are_the_longest_prefix_shared_with_an_earlier_request() {
        let mut c = PrefixCache::new();
        let first = c.observe("s", &["system prompt!", "hello there"]);
        assert_eq!(first.cached_tokens, 0);
        assert!(!first.broke);
        // Same front, one more message: everything before it is cached.
        let second = c.observe("s", &["system prompt!", "hello there", "more"]);
        assert_eq!(second.cached_tokens, 26 / 4);
        assert!(!second.broke);
        // Another session shares nothing.
        assert_eq!(c.observe("t", &["system prompt!"]).cached_tokens, 0);
        // The front changed: only the system prompt (and its newline) is shared: a break.
        let third = c.observe("s", &["system prompt!", "other", "more"]);
        assert_eq!(third.cached_tokens, 15 / 4);
        assert!(third.broke);
        let t = c.totals();
        assert_eq!((t.requests, t.follow_ups, t.breaks), (4, 2, 1));
    }
}
