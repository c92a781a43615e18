//! Compaction summaries written by the configured model, as a user sees them: `clawctx run` and
//! `clawctx chat` against a mock OpenAI-compatible server on loopback with a small window, then
//! `sessions show` (legacy's compaction entry) and `lcm describe` (lossless's leaf summaries)
//! show the model's text; the extractive fallback when the model fails; and `doctor` saying
//! which summarizer each engine uses and why. A failing test prints the command with its stdout
//! and stderr.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::Run;

use std::path::Path;
use std::process::Stdio;

use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

const REPLY: &str = "Noted.";
/// Longer than the 120 characters `sessions show` gives a message: it must be shown whole.
const LLM_SUMMARY: &str = "## Goal\nShip the alpha deployment (written by the mock model).\n\n## Progress\n### Done\n- Found error E0042 in src/deploy_0.rs\n\n## Critical Context\n- The rollback script is scripts/rollback_alpha.sh";
const SECRET: &str = "sk-mock-secret-5f1e";

/// Runs `clawctx` with `state` as state dir and its `clawctx.json`, `stdin` fed in, no
/// `OPENAI_*` from the environment, and `MOCK_API_KEY` set to [`SECRET`].
async fn clawctx_with_stdin(state: &Path, args: &[&str], stdin: &str) -> Run {
    let config = state.join("clawctx.json");
    let mut full = vec![
        "--state-dir",
        state.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
    ];
    full.extend_from_slice(args);
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_clawctx"))
        .args(&full)
        .env_remove("CLAWCTX_LOG")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_MODEL")
        .env("MOCK_API_KEY", SECRET)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running clawctx");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).await.unwrap();
    drop(input);
    let out = child.wait_with_output().await.expect("running clawctx");
    Run {
        cmd: format!("clawctx {}", full.join(" ")),
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

async fn clawctx(state: &Path, args: &[&str]) -> Run {
    clawctx_with_stdin(state, args, "").await
}

fn json_of(run: &Run) -> Value {
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{run}"))
}

/// Answers agent turns with [`REPLY`] (streamed or not) and summary requests (prompts holding
/// `<conversation>`) with [`LLM_SUMMARY`], or HTTP 500 when `fail_summaries`.
struct Responder {
    fail_summaries: bool,
}

impl Respond for Responder {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let reply = if String::from_utf8_lossy(&req.body).contains("<conversation>") {
            if self.fail_summaries {
                return ResponseTemplate::new(500)
                    .set_body_json(json!({"error": {"message": "summary backend down"}}));
            }
            LLM_SUMMARY
        } else {
            REPLY
        };
        if body.get("stream").and_then(Value::as_bool) == Some(true) {
            let sse = format!(
                "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
                json!({"choices": [{"index": 0, "delta": {"content": reply}}]}),
                json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            );
            return ResponseTemplate::new(200).set_body_raw(sse, "text/event-stream");
        }
        ResponseTemplate::new(200).set_body_json(json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
        }))
    }
}

async fn mock(fail_summaries: bool) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(Responder { fail_summaries })
        .mount(&server)
        .await;
    server
}

async fn summary_requests(server: &MockServer) -> usize {
    server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .filter(|r| String::from_utf8_lossy(&r.body).contains("<conversation>"))
        .count()
}

/// Provider `mock` at `server` (window 4000, 256 output tokens, key from `MOCK_API_KEY`) as the
/// agent's model, a compaction that keeps little, and `plugins`.
fn write_config(state: &Path, server: &MockServer, plugins: Value) {
    let config = json!({
        "models": {"providers": {"mock": {
            "api": "openai-completions", "baseUrl": format!("{}/v1", server.uri()), "apiKeyEnv": "MOCK_API_KEY",
            "models": [{"id": "test-model", "contextWindow": 4000, "maxTokens": 256}], "maxRetries": 0
        }}},
        "agents": {"defaults": {
            "model": {"primary": "mock/test-model"},
            "compaction": {"reserveTokens": 1000, "reserveTokensFloor": 0, "keepRecentTokens": 300}
        }},
        "plugins": plugins
    });
    std::fs::write(state.join("clawctx.json"), config.to_string()).unwrap();
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

/// `clawctx run` until `sessions list` counts a compaction (at most 10 turns); returns the
/// runs.
async fn run_until_compacted(state: &Path) -> Vec<Run> {
    let mut runs = Vec::new();
    for i in 0..10 {
        let r = clawctx(state, &["run", &prompt(i)]).await;
        assert_eq!(r.code, 0, "{r}");
        assert_eq!(r.stdout.trim(), REPLY, "every turn is answered: {r}");
        runs.push(r);
        let list = clawctx(state, &["sessions", "list"]).await;
        if !list.stdout.contains("\t0 compactions") {
            assert!(list.stdout.contains("compactions"), "{list}");
            return runs;
        }
    }
    panic!("10 turns of ~600 tokens in a 4000-token window never compacted");
}

#[tokio::test]
async fn run_compacts_with_the_agents_model_and_sessions_show_prints_its_summary() {
    let server = mock(false).await;
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &server, json!({}));
    let runs = run_until_compacted(dir.path()).await;
    assert!(
        summary_requests(&server).await > 0,
        "the compaction never asked the model for a summary"
    );
    let show = clawctx(dir.path(), &["sessions", "show", "agent:main:main"]).await;
    assert_eq!(show.code, 0, "{show}");
    for line in LLM_SUMMARY.lines() {
        assert!(
            show.stdout.contains(line),
            "`sessions show` must print the model's compaction summary line `{line}`:\n{show}"
        );
    }
    for r in &runs {
        assert!(
            !r.stderr.contains("extractive"),
            "no fallback was needed: {r}"
        );
    }
}

#[tokio::test]
async fn run_falls_back_to_the_extractive_summary_when_the_model_fails() {
    let server = mock(true).await;
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &server, json!({}));
    let runs = run_until_compacted(dir.path()).await;
    assert!(
        summary_requests(&server).await > 0,
        "the model was asked first"
    );
    let compacting = runs.last().unwrap();
    assert!(
        compacting
            .stderr
            .contains("summarizer `mock:test-model` failed")
            && compacting
                .stderr
                .contains("using the extractive summary instead"),
        "the fallback must be logged once, naming the summarizer: {compacting}"
    );
    assert!(
        !compacting.stderr.contains(SECRET),
        "the API key must never be logged: {compacting}"
    );
    let show = clawctx(dir.path(), &["sessions", "show", "agent:main:main"]).await;
    assert!(
        show.stdout.contains("compaction: ")
            && !show.stdout.contains(LLM_SUMMARY.lines().nth(1).unwrap()),
        "the compaction entry holds the extractive summary: {show}"
    );
}

#[tokio::test]
async fn chat_on_lossless_writes_leaf_summaries_with_the_agents_model() {
    let server = mock(false).await;
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        &server,
        json!({"slots": {"contextEngine": "lossless"},
               "entries": {"lossless": {"config": {"freshTailCount": 2, "minSalientRetention": 0}}}}),
    );
    let mut input: String = (0..3).map(|i| prompt(i) + "\n").collect();
    input.push_str("/compact\n/quit\n");
    let chat = clawctx_with_stdin(dir.path(), &["chat"], &input).await;
    assert_eq!(chat.code, 0, "{chat}");
    assert!(chat.stderr.contains("engine lossless"), "{chat}");
    assert!(
        summary_requests(&server).await > 0,
        "lossless never asked the model: {chat}"
    );
    let describe = clawctx(dir.path(), &["lcm", "describe", "sum_1"]).await;
    assert_eq!(describe.code, 0, "{describe}");
    let sum = json_of(&describe);
    assert_eq!(
        (sum["summarizer"].as_str(), sum["text"].as_str()),
        (Some("mock:test-model"), Some(LLM_SUMMARY)),
        "the first leaf summary is the model's, attributed to it: {describe}"
    );
}

fn summarizer_of<'a>(doctor: &'a Value, engine: &str) -> &'a Value {
    doctor["summarizers"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["engine"] == engine))
        .unwrap_or_else(|| panic!("doctor reports no summarizer for {engine}: {doctor:#}"))
}

#[tokio::test]
async fn doctor_says_which_summarizer_each_engine_uses_and_why() {
    let server = mock(false).await;
    let dir = tempfile::tempdir().unwrap();

    // No model anywhere.
    let d = json_of(&clawctx(dir.path(), &["doctor", "--json"]).await);
    for engine in ["legacy", "lossless"] {
        let s = summarizer_of(&d, engine);
        assert_eq!(
            (&s["kind"], &s["source"], &s["description"]),
            (
                &json!("extractive"),
                &json!("noModel"),
                &json!("extractive (no model configured)")
            ),
            "{engine}: {d:#}"
        );
    }

    // The agent's model.
    write_config(dir.path(), &server, json!({}));
    let text = clawctx(dir.path(), &["doctor"]).await;
    assert!(
        text.stdout
            .contains("summarizer  legacy: llm mock/test-model (agent model)")
            && text
                .stdout
                .contains("lossless: llm mock/test-model (agent model)"),
        "{text}"
    );
    let run = clawctx(dir.path(), &["doctor", "--json"]).await;
    let d = json_of(&run);
    assert_eq!(d["status"], "ok", "{run}");
    let s = summarizer_of(&d, "legacy");
    assert_eq!(
        (&s["kind"], &s["model"], &s["source"]),
        (
            &json!("llm"),
            &json!("mock/test-model"),
            &json!("agentModel")
        ),
        "{run}"
    );
    assert!(
        !text.stdout.contains(SECRET) && !run.stdout.contains(SECRET),
        "the API key must never be shown: {run}"
    );

    // A separate summary model.
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("clawctx.json")).unwrap())
            .unwrap();
    config["models"]["providers"]["mock"]["models"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "small"}));
    config["agents"]["defaults"]["compaction"]["model"] = json!("mock/small");
    std::fs::write(dir.path().join("clawctx.json"), config.to_string()).unwrap();
    let d = json_of(&clawctx(dir.path(), &["doctor", "--json"]).await);
    let s = summarizer_of(&d, "lossless");
    assert_eq!(
        (&s["kind"], &s["model"], &s["description"]),
        (
            &json!("llm"),
            &json!("mock/small"),
            &json!("llm mock/small (agents.defaults.compaction.model)")
        ),
        "{d:#}"
    );

    // A summary model that does not resolve: reported, with the key to fix.
    config["agents"]["defaults"]["compaction"]["model"] = json!("mock/missing");
    std::fs::write(dir.path().join("clawctx.json"), config.to_string()).unwrap();
    let run = clawctx(dir.path(), &["doctor", "--json"]).await;
    let d = json_of(&run);
    let s = summarizer_of(&d, "legacy");
    assert_eq!(s["kind"], "error", "{run}");
    assert!(
        s["description"]
            .as_str()
            .unwrap()
            .contains("agents.defaults.compaction.model"),
        "{run}"
    );
    assert_eq!(d["status"], "warning", "{run}");

    // A CLI backend is no model provider.
    let cli = json!({"agents": {"defaults": {
        "model": {"primary": "claude-cli/opus"},
        "cliBackends": {"claude-cli": {"command": "claude"}}
    }}});
    std::fs::write(dir.path().join("clawctx.json"), cli.to_string()).unwrap();
    let d = json_of(&clawctx(dir.path(), &["doctor", "--json"]).await);
    assert_eq!(
        summarizer_of(&d, "legacy")["description"],
        "extractive (cli backend)",
        "{d:#}"
    );
}

#[tokio::test]
async fn doctor_reports_an_open_summarizer_breaker() {
    let server = mock(false).await;
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &server, json!({}));
    std::fs::create_dir_all(dir.path().join("runtime")).unwrap();
    std::fs::write(
        dir.path().join("runtime/summarizer-breaker.json"),
        json!({"state": "open", "consecutiveFailures": 3, "openedAtMs": 1, "lastError": "HTTP 503"})
            .to_string(),
    )
    .unwrap();
    let run = clawctx(dir.path(), &["doctor", "--json"]).await;
    let d = json_of(&run);
    assert_eq!(d["summarizerBreaker"]["state"], "open", "{run}");
    assert_eq!(
        d["status"], "warning",
        "an open breaker is worth a warning: {run}"
    );
    let text = clawctx(dir.path(), &["doctor"]).await;
    assert!(
        text.stdout
            .contains("circuit breaker open after 3 consecutive failures (last: HTTP 503)"),
        "{text}"
    );
}
