//! A gateway on loopback for the integration tests: a runtime built from an OpenClaw-shaped
//! config (legacy or lossless) against a mock OpenAI-compatible model server (wiremock, also on
//! loopback) that answers from a queue, optionally after a delay, streaming or not.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clawctx_engine::ContextEngineRegistry;
use clawctx_gateway::{Gateway, GatewayConfig, GatewayParts, Token};
use clawctx_protocol::SelectionSource;
use clawctx_runtime::{select_backend, AgentRuntime};
use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// One queued model reply: text, and tool calls `(id, name, arguments JSON)`.
#[derive(Clone, Debug)]
pub struct Reply {
    pub text: String,
    pub delay: Duration,
    pub calls: Vec<(String, String, String)>,
}

pub fn text(t: &str) -> Reply {
    Reply {
        text: t.to_owned(),
        delay: Duration::ZERO,
        calls: Vec::new(),
    }
}

pub fn slow(t: &str, delay: Duration) -> Reply {
    Reply {
        text: t.to_owned(),
        delay,
        calls: Vec::new(),
    }
}

/// A reply calling tools (its text may be empty).
pub fn calls(t: &str, calls: &[(&str, &str, Value)]) -> Reply {
    Reply {
        text: t.to_owned(),
        delay: Duration::ZERO,
        calls: calls
            .iter()
            .map(|(id, name, args)| ((*id).to_owned(), (*name).to_owned(), args.to_string()))
            .collect(),
    }
}

#[derive(Clone, Default)]
struct Queue(Arc<Mutex<VecDeque<Reply>>>);

impl Respond for Queue {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let stream = body.get("stream").and_then(Value::as_bool) == Some(true);
        let usage = json!({"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110});
        let Some(reply) = self.0.lock().unwrap().pop_front() else {
            return ResponseTemplate::new(500)
                .set_body_json(json!({"error": {"message": "mock script exhausted"}}));
        };
        let finish = if reply.calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        };
        let template = if stream {
            // Two content chunks, so a streaming client sees more than one delta; each tool
            // call in two fragments.
            let (a, b) = reply.text.split_at(reply.text.len() / 2);
            let mut chunks = vec![
                json!({"choices": [{"index": 0, "delta": {"content": a}}]}),
                json!({"choices": [{"index": 0, "delta": {"content": b}}]}),
            ];
            for (i, (id, name, args)) in reply.calls.iter().enumerate() {
                let (x, y) = args.split_at(args.len() / 2);
                chunks.push(json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                    {"index": i, "id": id, "type": "function", "function": {"name": name, "arguments": x}}]}}]}));
                chunks.push(json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                    {"index": i, "function": {"arguments": y}}]}}]}));
            }
            chunks.push(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}], "usage": usage}));
            let mut sse: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
            sse.push_str("data: [DONE]\n\n");
            ResponseTemplate::new(200).set_body_raw(sse, "text/event-stream")
        } else {
            let mut message = json!({"role": "assistant", "content": reply.text});
            if !reply.calls.is_empty() {
                message["tool_calls"] = reply
                    .calls
                    .iter()
                    .map(|(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}))
                    .collect();
            }
            ResponseTemplate::new(200).set_body_json(json!({
                "id": "chatcmpl-mock",
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage
            }))
        };
        template.set_delay(reply.delay)
    }
}

/// The mock model server.
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

    /// Every request body the model got.
    pub async fn bodies(&self) -> Vec<Value> {
        self.server
            .received_requests()
            .await
            .unwrap_or_default()
            .iter()
            .map(|r| serde_json::from_slice(&r.body).unwrap())
            .collect()
    }

    pub fn config(&self, engine: &str) -> Value {
        json!({
            "models": {"providers": {"mock": {
                "api": "openai-completions",
                "baseUrl": format!("{}/v1", self.server.uri()),
                "models": [{"id": "test-model", "contextWindow": 32000, "maxTokens": 1024}],
                "maxRetries": 0, "timeoutMs": 20000
            }}},
            "agents": {"defaults": {"model": {"primary": "mock/test-model"}}},
            "plugins": {"slots": {"contextEngine": engine}}
        })
    }
}

/// What to start.
pub struct Opts {
    pub engine: &'static str,
    pub token: Option<&'static str>,
    pub tweak: Box<dyn FnOnce(&mut GatewayConfig) + Send>,
    /// Summaries by the model (the mock), as `clawctx gateway` sets up a configured model,
    /// instead of the extractive summarizer alone.
    pub llm_summarizer: bool,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            engine: "legacy",
            token: None,
            tweak: Box::new(|_| {}),
            llm_summarizer: false,
        }
    }
}

/// A running gateway.
pub struct TestGateway {
    pub url: String,
    pub http: reqwest::Client,
    pub llm: MockLlm,
    pub runtime: AgentRuntime,
    pub state: tempfile::TempDir,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    join: Option<tokio::task::JoinHandle<clawctx_gateway::Result<()>>>,
}

pub async fn start(opts: Opts) -> TestGateway {
    let llm = MockLlm::start().await;
    let state = tempfile::tempdir().unwrap();
    start_on(llm, state, opts).await
}

/// A gateway on `state` (a state dir another gateway may have used: a restart) talking to
/// `llm`.
pub async fn start_on(llm: MockLlm, state: tempfile::TempDir, opts: Opts) -> TestGateway {
    let mut settings = GatewayConfig::loopback(0);
    settings.token = opts.token.map(Token::new);
    (opts.tweak)(&mut settings);
    let Served {
        url,
        http,
        runtime,
        stop,
        join,
        ..
    } = serve(Serve {
        llm_summarizer: opts.llm_summarizer,
        gateway: settings,
        ..Serve::new(llm.config(opts.engine), state.path(), opts.engine)
    })
    .await;
    TestGateway {
        url,
        http,
        llm,
        runtime,
        state,
        stop,
        join,
    }
}

/// How [`serve`] builds a gateway, as `clawctx gateway` does from a config.
pub struct Serve<'a> {
    /// The host config (OpenClaw's shape).
    pub config: Value,
    /// The state dir.
    pub state: &'a Path,
    /// The engine the config must make serve.
    pub engine: &'a str,
    /// The host's LLM summarizer (the config's model, behind its persisted circuit breaker),
    /// as `clawctx gateway` sets up for a configured model, instead of the extractive one alone.
    pub llm_summarizer: bool,
    /// The runtime's prompt budget, when not the model's window.
    pub prompt_budget: Option<u64>,
    /// The agent dir the registry gives engines (default `<state>/agents/main`).
    pub agent_dir: Option<PathBuf>,
    /// The gateway's settings.
    pub gateway: GatewayConfig,
}

impl<'a> Serve<'a> {
    /// `config` on `state`, `engine` serving, on a loopback port, nothing else set.
    pub fn new(config: Value, state: &'a Path, engine: &'a str) -> Serve<'a> {
        Serve {
            config,
            state,
            engine,
            llm_summarizer: false,
            prompt_budget: None,
            agent_dir: None,
            gateway: GatewayConfig::loopback(0),
        }
    }
}

/// A gateway serving on loopback.
pub struct Served {
    pub url: String,
    pub http: reqwest::Client,
    pub runtime: AgentRuntime,
    pub registry: Arc<ContextEngineRegistry>,
    pub stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub join: Option<tokio::task::JoinHandle<clawctx_gateway::Result<()>>>,
}

impl Served {
    /// Stops the serve loop and waits for it (at most 60 s).
    pub async fn stop(&mut self) -> clawctx_gateway::Result<()> {
        stop_serving(&mut self.stop, &mut self.join).await
    }
}

/// Signals a serve loop to stop and waits for it (at most 60 s); once only.
async fn stop_serving(
    stop: &mut Option<tokio::sync::oneshot::Sender<()>>,
    join: &mut Option<tokio::task::JoinHandle<clawctx_gateway::Result<()>>>,
) -> clawctx_gateway::Result<()> {
    if let Some(tx) = stop.take() {
        let _ = tx.send(());
    }
    let join = join.take().expect("stopped once");
    tokio::time::timeout(Duration::from_secs(60), join)
        .await
        .expect("the gateway stops within 60 s")
        .unwrap()
}

/// Resolves the engine `s.config` selects through a registry holding legacy and lossless,
/// builds the runtime and serves a gateway over it on loopback.
pub async fn serve(s: Serve<'_>) -> Served {
    let config = Arc::new(s.config);
    let registry = Arc::new(ContextEngineRegistry::with_legacy());
    clawctx_lossless::register(&registry).unwrap();
    let agent_dir = s
        .agent_dir
        .unwrap_or_else(|| s.state.join("agents").join("main"));
    let backend = select_backend(&config, None, &|_| None).unwrap();
    let summarizer = s.llm_summarizer.then(|| {
        let h =
            clawctx_runtime::setup::host_summarizer(&config, Some(&backend), &|_| None, s.state)
                .unwrap();
        assert!(
            h.llm.is_some(),
            "the config names a model to summarize with"
        );
        registry.set_host_summarizer(h.llm.clone());
        h.for_runtime()
    });
    let resolved = registry
        .resolve(
            Some(config.clone()),
            Some(agent_dir.clone()),
            Some(agent_dir.clone()),
        )
        .await
        .unwrap();
    assert_eq!(
        resolved.effective_id, s.engine,
        "the engine under test must serve"
    );
    let mut builder = AgentRuntime::builder(s.state, resolved.engine.clone(), backend)
        .selection(resolved.effective_id.clone(), SelectionSource::Configured)
        .workspace_dir(agent_dir.to_string_lossy().into_owned());
    if let Some(summarizer) = summarizer {
        builder = builder.summarizer(summarizer);
    }
    if let Some(budget) = s.prompt_budget {
        builder = builder.prompt_budget(Some(budget));
    }
    let runtime = builder.build();
    let gateway = Gateway::new(GatewayParts {
        runtime: runtime.clone(),
        registry: Some(registry.clone()),
        host_config: config,
        model: "mock/test-model".into(),
        config: s.gateway,
    });
    let listener = gateway.bind().await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let join = tokio::spawn(gateway.serve(listener, async move {
        let _ = rx.await;
    }));
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    Served {
        url,
        http,
        runtime,
        registry,
        stop: Some(tx),
        join: Some(join),
    }
}

impl TestGateway {
    pub fn at(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.http.get(self.at(path)).send().await.unwrap()
    }

    pub async fn post(&self, path: &str, body: &Value) -> reqwest::Response {
        self.http
            .post(self.at(path))
            .json(body)
            .send()
            .await
            .unwrap()
    }

    /// One chat completion with `prompt` in session `key` (`x-clawctx-session`), which must
    /// succeed.
    pub async fn chat(&self, key: &str, prompt: &str) {
        let r = self
            .http
            .post(self.at("/v1/chat/completions"))
            .header("x-clawctx-session", key)
            .json(&json!({"messages": [{"role": "user", "content": prompt}]}))
            .send()
            .await
            .unwrap();
        let status = r.status();
        assert_eq!(
            status,
            200,
            "chat in {key}: {}",
            r.text().await.unwrap_or_default()
        );
    }

    /// Signals shutdown and waits (bounded) for the serve loop to return.
    pub async fn stop(&mut self) -> clawctx_gateway::Result<()> {
        stop_serving(&mut self.stop, &mut self.join).await
    }

    /// Stops this gateway and starts a new one on the same state dir and mock model (a
    /// restart: whatever is kept in the state dir must be there again).
    pub async fn restart(self, opts: Opts) -> TestGateway {
        let mut old = self;
        old.stop().await.expect("the gateway stops cleanly");
        let TestGateway { llm, state, .. } = old;
        start_on(llm, state, opts).await
    }

    /// Signals shutdown without waiting.
    pub fn signal_stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }

    /// Waits for a serve loop already signalled.
    pub async fn join(&mut self) -> clawctx_gateway::Result<()> {
        let join = self.join.take().expect("joined once");
        tokio::time::timeout(Duration::from_secs(60), join)
            .await
            .expect("the gateway stops within 60 s")
            .unwrap()
    }
}

/// Asserts OpenAI's error shape and returns the error object.
pub async fn error_of(r: reqwest::Response, status: u16) -> Value {
    assert_eq!(r.status().as_u16(), status, "status");
    let body: Value = r.json().await.expect("an error body is JSON");
    let e = body
        .get("error")
        .cloned()
        .unwrap_or_else(|| panic!("no `error` in {body}"));
    for k in ["message", "type", "param", "code"] {
        assert!(e.get(k).is_some(), "error object lacks `{k}`: {body}");
    }
    e
}
