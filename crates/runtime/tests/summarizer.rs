//! Compaction summaries written by the configured model, through `runtime_from_config` and a
//! mock OpenAI-compatible server on loopback: `legacy`'s built-in compaction (§7.4) and the
//! lossless engine's leaf summaries ask the agent's model, and fall back to the extractive
//! summarizer when it fails, with the turn still answered and a warning logged.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::{Arc, Mutex};

use clawctx_engine::ContextEngineRegistry;
use clawctx_lossless::{DescribeReport, LosslessStore};
use clawctx_protocol::transcript::EntryKind;
use clawctx_runtime::setup::{runtime_from_config, SetupOptions};
use clawctx_runtime::{AgentRuntime, TurnOutcome, TurnRequest};
use clawctx_test_support::logs::capture_tracing;
use clawctx_transcript::SessionFile;
use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

const KEY: &str = "agent:main:main";
const REPLY: &str = "Noted.";
const LLM_SUMMARY: &str = "## Goal\nShip the alpha deployment (written by the mock model).";
/// The §7.4 headings every history summary request asks for.
const HEADINGS: [&str; 8] = [
    "## Goal",
    "## Constraints & Preferences",
    "## Progress",
    "### Done",
    "### In Progress",
    "## Key Decisions",
    "## Next Steps",
    "## Critical Context",
];

/// How the mock answers summary requests (those whose prompt holds `<conversation>`).
#[derive(Clone, Copy, Debug)]
enum Summaries {
    Answer,
    Http500,
    Garbage,
}

/// Answers agent turns with [`REPLY`] (streamed or not) and summary requests per the mode.
#[derive(Clone)]
struct Responder(Arc<Mutex<Summaries>>);

impl Respond for Responder {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let is_summary = String::from_utf8_lossy(&req.body).contains("<conversation>");
        let reply = if is_summary {
            match *self.0.lock().unwrap() {
                Summaries::Answer => LLM_SUMMARY,
                Summaries::Http500 => {
                    return ResponseTemplate::new(500)
                        .set_body_json(json!({"error": {"message": "summary backend down"}}))
                }
                Summaries::Garbage => {
                    return ResponseTemplate::new(200)
                        .set_body_raw("<html>502 upstream proxy hiccup</html>", "text/html")
                }
            }
        } else {
            REPLY
        };
        let usage = json!({"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110});
        if body.get("stream").and_then(Value::as_bool) == Some(true) {
            let chunks = [
                json!({"choices": [{"index": 0, "delta": {"content": reply}}]}),
                json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage}),
            ];
            let mut sse: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
            sse.push_str("data: [DONE]\n\n");
            return ResponseTemplate::new(200).set_body_raw(sse, "text/event-stream");
        }
        ResponseTemplate::new(200).set_body_json(json!({
            "id": "chatcmpl-mock",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
            "usage": usage
        }))
    }
}

struct Mocked {
    server: MockServer,
}

impl Mocked {
    async fn start(mode: Summaries) -> Self {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/v1/chat/completions"))
            .respond_with(Responder(Arc::new(Mutex::new(mode))))
            .mount(&server)
            .await;
        Self { server }
    }

    /// The bodies of the summary requests received so far.
    async fn summary_requests(&self) -> Vec<Value> {
        self.server
            .received_requests()
            .await
            .unwrap_or_default()
            .iter()
            .filter(|r| String::from_utf8_lossy(&r.body).contains("<conversation>"))
            .map(|r| serde_json::from_slice(&r.body).unwrap())
            .collect()
    }

    /// A config with provider `mock` (window 4000, 256 output tokens) as the agent's model, the
    /// given `agents.defaults.compaction` and `plugins`.
    fn config(&self, compaction: Value, plugins: Value) -> Value {
        json!({
            "models": {"providers": {"mock": {
                "api": "openai-completions",
                "baseUrl": format!("{}/v1", self.server.uri()),
                "models": [{"id": "test-model", "contextWindow": 4000, "maxTokens": 256}],
                "maxRetries": 0, "timeoutMs": 10000
            }}},
            "agents": {"defaults": {"model": {"primary": "mock/test-model"}, "compaction": compaction}},
            "plugins": plugins
        })
    }
}

async fn runtime(dir: &Path, config: Value) -> AgentRuntime {
    let registry = Arc::new(ContextEngineRegistry::with_legacy());
    clawctx_lossless::register(&registry).unwrap();
    runtime_from_config(SetupOptions {
        config: Arc::new(config),
        state_dir: dir.to_path_buf(),
        registry,
        model: None,
        env: &|_| None,
        agent_id: "main".into(),
        hooks: None,
        tools: Vec::new(),
        model_optional: false,
    })
    .await
    .unwrap()
}

/// A long prompt full of identifiers, so a few turns fill the small window.
fn prompt(i: usize) -> String {
    format!(
        "Turn {i}: {}",
        format!(
            "the deployment of service alpha-{i} failed with error E{i}042 in src/deploy_{i}.rs; "
        )
        .repeat(25)
    )
}

fn compaction_summaries(runtime: &AgentRuntime) -> Vec<String> {
    let entry = runtime
        .store()
        .get(KEY)
        .unwrap()
        .expect("the session exists");
    let path = runtime.store().transcript_path("main", &entry).unwrap();
    let file = SessionFile::open(&path).unwrap();
    file.active_path()
        .iter()
        .filter_map(|e| match &e.kind {
            EntryKind::Compaction(c) => Some(c.summary.clone()),
            _ => None,
        })
        .collect()
}

/// Runs turns on `legacy` until the built-in compaction has written a compaction entry (at
/// most 10 turns); returns the outcomes and the compaction summaries.
async fn legacy_turns_until_compaction(
    dir: &Path,
    mock: &Mocked,
) -> (Vec<TurnOutcome>, Vec<String>) {
    let config = mock.config(
        json!({"reserveTokens": 1000, "reserveTokensFloor": 0, "keepRecentTokens": 300}),
        json!({}),
    );
    let runtime = runtime(dir, config).await;
    assert_eq!(runtime.engine_id(), "legacy");
    let mut outcomes = Vec::new();
    for i in 0..10 {
        outcomes.push(
            runtime
                .run_turn(TurnRequest::new(KEY, prompt(i)))
                .await
                .unwrap(),
        );
        let summaries = compaction_summaries(&runtime);
        if !summaries.is_empty() {
            runtime.shutdown().await;
            return (outcomes, summaries);
        }
    }
    panic!("10 turns of ~600 tokens in a 4000-token window never compacted: {outcomes:#?}");
}

#[tokio::test]
async fn legacy_compaction_summary_is_written_by_the_agents_model() {
    let dir = tempfile::tempdir().unwrap();
    let mock = Mocked::start(Summaries::Answer).await;
    let (outcomes, summaries) = legacy_turns_until_compaction(dir.path(), &mock).await;

    let requests = mock.summary_requests().await;
    assert!(
        !requests.is_empty(),
        "the built-in compaction never asked the model for a summary"
    );
    let history = requests
        .iter()
        .map(|b| b["messages"].to_string())
        .find(|m| m.contains("## Goal"))
        .unwrap_or_else(|| panic!("no history summary request among {requests:#?}"));
    for tag in ["<conversation>", "</conversation>"] {
        assert!(
            history.contains(tag),
            "the summary request must wrap the conversation in {tag}: {history}"
        );
    }
    for heading in HEADINGS {
        assert!(
            history.contains(heading),
            "the summary request must ask for `{heading}` (§7.4): {history}"
        );
    }
    assert!(
        history.contains("alpha-0"),
        "the summarized turns must be in the request: {history}"
    );
    for b in &requests {
        assert_eq!(
            b["model"], "test-model",
            "summaries use the agent's model: {b}"
        );
        let max = b["max_tokens"].as_u64().expect("max_tokens is sent");
        assert!(
            max <= 256,
            "a summary request must not ask for more than the model's maxTokens (256): {max}"
        );
    }
    assert!(
        summaries.iter().any(|s| s.contains(LLM_SUMMARY)),
        "the model's summary text must land in the transcript's compaction entry: {summaries:#?}"
    );
    assert!(
        outcomes.iter().all(|o| o.reply == REPLY),
        "every turn answered: {outcomes:#?}"
    );
}

#[tokio::test]
async fn legacy_compaction_falls_back_to_extractive_when_the_model_fails() {
    for mode in [Summaries::Http500, Summaries::Garbage] {
        let (_guard, logs) = capture_tracing();
        let dir = tempfile::tempdir().unwrap();
        let mock = Mocked::start(mode).await;
        let (outcomes, summaries) = legacy_turns_until_compaction(dir.path(), &mock).await;

        assert!(
            !mock.summary_requests().await.is_empty(),
            "{mode:?}: the model was never asked for a summary"
        );
        assert!(
            summaries.iter().all(|s| !s.contains(LLM_SUMMARY) && !s.trim().is_empty()),
            "{mode:?}: the compaction entry must hold a non-empty extractive summary: {summaries:#?}"
        );
        assert!(
            summaries
                .iter()
                .any(|s| s.contains("alpha-") || s.contains("src/deploy_")),
            "{mode:?}: the extractive summary keeps the conversation's identifiers: {summaries:#?}"
        );
        let last = outcomes.last().unwrap();
        assert_eq!(
            last.reply, REPLY,
            "{mode:?}: the turn that compacted is still answered"
        );
        assert!(
            last.warnings.is_empty(),
            "{mode:?}: the fallback is not a failed compaction: {:?}",
            last.warnings
        );
        let warnings = logs.warnings();
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("summarizer `mock:test-model` failed")
                    && w.contains("extractive")),
            "{mode:?}: one warning must name the summarizer and the fallback; got {warnings:#?}"
        );
    }
}

fn lossless_plugins(dir: &Path) -> Value {
    json!({
        "slots": {"contextEngine": "lossless"},
        "entries": {"lossless": {"config": {
            "databasePath": dir.join("lossless.db"),
            "freshTailCount": 2,
            "minSalientRetention": 0,
            "circuitBreakerThreshold": 1
        }}}
    })
}

/// Every summary in the lossless store: (summarizer, text).
async fn lossless_summaries(dir: &Path) -> Vec<(String, String)> {
    let store = LosslessStore::open(dir.join("lossless.db")).unwrap();
    let mut out = Vec::new();
    for n in 1.. {
        match store.describe(&format!("sum_{n}")).await {
            Ok(DescribeReport::Summary(s)) => out.push((s.summarizer, s.text)),
            _ => break,
        }
    }
    out
}

/// A lossless runtime after two turns: under the engine's threshold, so nothing is compacted
/// before the test's `/compact` (more turns would pass it, and the maintenance lane would
/// summarize them first).
async fn lossless_runtime_with_turns(dir: &Path, mock: &Mocked) -> AgentRuntime {
    let runtime = runtime(dir, mock.config(json!({}), lossless_plugins(dir))).await;
    assert_eq!(runtime.engine_id(), "lossless");
    for i in 0..2 {
        let out = runtime
            .run_turn(TurnRequest::new(KEY, prompt(i)))
            .await
            .unwrap();
        assert_eq!(out.reply, REPLY);
    }
    runtime
}

#[tokio::test]
async fn lossless_leaf_summaries_are_written_by_the_agents_model() {
    let dir = tempfile::tempdir().unwrap();
    let mock = Mocked::start(Summaries::Answer).await;
    let runtime = lossless_runtime_with_turns(dir.path(), &mock).await;
    let r = runtime.compact(KEY, None).await.unwrap();
    assert!(
        r.ok && r.compacted,
        "/compact on lossless must compact: {r:?}"
    );
    runtime.shutdown().await;

    let requests = mock.summary_requests().await;
    assert!(
        !requests.is_empty(),
        "the lossless engine never asked the model for a summary"
    );
    let prompt = requests[0]["messages"].to_string();
    assert!(
        prompt.contains("<conversation>") && prompt.contains("alpha-0"),
        "a leaf request carries the messages: {prompt}"
    );
    let summaries = lossless_summaries(dir.path()).await;
    assert!(
        summaries
            .iter()
            .any(|(by, text)| by == "mock:test-model" && text == LLM_SUMMARY),
        "the model's leaf summary must be in the DAG, attributed to it: {summaries:#?}"
    );
}

#[tokio::test]
async fn lossless_summarizes_extractively_when_the_model_fails() {
    let (_guard, logs) = capture_tracing();
    let dir = tempfile::tempdir().unwrap();
    let mock = Mocked::start(Summaries::Http500).await;
    let runtime = lossless_runtime_with_turns(dir.path(), &mock).await;

    // The model fails: its summary never becomes a node, but compaction still makes
    // progress: the range is summarized extractively in the same pass (and the engine's
    // breaker opens, threshold 1).
    let first = runtime.compact(KEY, None).await.unwrap();
    assert!(first.ok && first.compacted, "{first:?}");
    assert!(
        !mock.summary_requests().await.is_empty(),
        "the model was asked first"
    );
    let summaries = lossless_summaries(dir.path()).await;
    assert!(
        !summaries.is_empty() && summaries.iter().all(|(by, _)| by == "extractive-fallback"),
        "after the provider failed, the DAG holds extractive summaries marked as the fallback: {summaries:#?}"
    );
    assert!(
        logs.warnings()
            .iter()
            .any(|w| w.contains("summary rejected") && w.contains("summary backend down")),
        "the failure is logged with the provider's words: {:#?}",
        logs.warnings()
    );
    let next = runtime
        .run_turn(TurnRequest::new(KEY, "still there?"))
        .await
        .unwrap();
    assert_eq!(next.reply, REPLY, "the agent keeps answering");
    runtime.shutdown().await;
}
