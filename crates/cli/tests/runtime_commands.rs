//! `clawctx run`, `sessions` and `replay` as a user runs them: one turn against a mock
//! OpenAI-compatible server on loopback, the session listed/shown/exported, a clear error when
//! no model is configured, and a 2,000-turn replay on `legacy` that never exceeds its budget.
//! A failing test prints the command with its stdout and stderr.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::Run;

use std::path::Path;

use serde_json::{json, Value};
use wiremock::matchers::{body_partial_json, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

async fn clawctx(state: &Path, args: &[&str]) -> Run {
    let config = state.join("clawctx.json");
    let mut full = vec![
        "--state-dir",
        state.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
    ];
    full.extend_from_slice(args);
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_clawctx"))
        .args(&full)
        .env_remove("CLAWCTX_LOG")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_MODEL")
        .output()
        .await
        .expect("running clawctx");
    Run {
        cmd: format!("clawctx {}", full.join(" ")),
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn json_of(run: &Run) -> Value {
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{run}"))
}

#[tokio::test]
async fn run_without_a_model_names_the_config_keys() {
    let dir = tempfile::tempdir().unwrap();
    let r = clawctx(dir.path(), &["run", "hello"]).await;
    assert_ne!(r.code, 0, "{r}");
    assert!(
        r.stderr.contains("agents.defaults.model.primary") && r.stderr.contains("--model"),
        "{r}"
    );
    let r = clawctx(dir.path(), &["run", "hello", "--model", "nope/model-x"]).await;
    assert_ne!(r.code, 0, "{r}");
    assert!(r.stderr.contains("models.providers"), "{r}");
}

#[tokio::test]
async fn run_json_then_sessions_list_show_export() {
    let server = MockServer::start().await;
    let sse = concat!(
        "data: {\"choices\": [{\"index\": 0, \"delta\": {\"content\": \"Pong from the mock.\"}}]}\n\n",
        "data: {\"choices\": [{\"index\": 0, \"delta\": {}, \"finish_reason\": \"stop\"}]}\n\n",
        "data: [DONE]\n\n"
    );
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(body_partial_json(json!({"stream": true})))
        .respond_with(ResponseTemplate::new(200).set_body_raw(sse, "text/event-stream"))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Pong from the mock."}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 4, "total_tokens": 24}
        })))
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let config = json!({
        "models": {"providers": {"mock": {"api": "openai-completions", "baseUrl": format!("{}/v1", server.uri()),
            "models": [{"id": "test-model", "contextWindow": 16000, "maxTokens": 512}], "maxRetries": 0}}},
        "agents": {"defaults": {"model": {"primary": "mock/test-model"}}}
    });
    std::fs::write(dir.path().join("clawctx.json"), config.to_string()).unwrap();

    let r = clawctx(dir.path(), &["run", "ping", "--json"]).await;
    assert_eq!(r.code, 0, "{r}");
    let out = json_of(&r);
    assert_eq!(out["reply"], "Pong from the mock.", "{r}");
    assert_eq!(out["engine"], "legacy", "{r}");
    assert_eq!(out["sessionKey"], "agent:main:main", "{r}");

    let r = clawctx(dir.path(), &["run", "ping again"]).await;
    assert_eq!(r.code, 0, "{r}");
    assert_eq!(r.stdout.trim(), "Pong from the mock.", "{r}");

    let r = clawctx(dir.path(), &["sessions", "list"]).await;
    assert!(r.code == 0 && r.stdout.contains("agent:main:main"), "{r}");
    let r = clawctx(dir.path(), &["sessions", "show", "agent:main:main"]).await;
    assert!(
        r.code == 0 && r.stdout.contains("ping again") && r.stdout.contains("Pong from the mock."),
        "{r}"
    );
    let r = clawctx(dir.path(), &["sessions", "export", "agent:main:main"]).await;
    assert_eq!(r.code, 0, "{r}");
    let lines: Vec<Value> = r
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["type"], "session", "{r}");
    assert_eq!(
        lines.iter().filter(|l| l["type"] == "message").count(),
        4,
        "{r}"
    );
}

/// Writes `messages` as a recording (one JSON object a line) in `dir` and makes a state dir
/// next to it; returns both paths.
fn recording_and_state(
    dir: &Path,
    messages: &[clawctx_protocol::AgentMessage],
) -> (std::path::PathBuf, std::path::PathBuf) {
    let recording = dir.join("recording.jsonl");
    let text: String = messages
        .iter()
        .map(|m| format!("{}\n", serde_json::to_string(m).unwrap()))
        .collect();
    std::fs::write(&recording, text).unwrap();
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    (recording, state)
}

/// `clawctx replay --json` of a generated `turns`-turn conversation (seeded by `seed`)
/// through `engine` at `budget`: the report, after checking the command succeeded.
async fn replay_report(seed: u64, turns: usize, engine: &str, budget: u64) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let messages = clawctx_test_support::messages::conversation(seed, turns, 5);
    let (recording, state) = recording_and_state(dir.path(), &messages);
    let budget = budget.to_string();
    let r = clawctx(
        &state,
        &[
            "replay",
            recording.to_str().unwrap(),
            "--engine",
            engine,
            "--budget",
            &budget,
            "--json",
        ],
    )
    .await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    json_of(&r)
}

#[tokio::test]
async fn replay_of_2000_turns_on_legacy_never_exceeds_the_budget() {
    let budget = 3000u64;
    let report = replay_report(7, 2000, "legacy", budget).await;
    let turns = report["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 2000);
    for t in turns {
        assert!(
            t["promptTokens"].as_u64().unwrap() <= budget,
            "turn over budget: {t}"
        );
        assert_eq!(t["engine"], "legacy");
    }
    assert_eq!(report["overBudgetTurns"], 0);
    assert!(
        report["totalCompactions"].as_u64().unwrap() > 0,
        "a long conversation compacts"
    );
    assert!(turns.iter().any(|t| t["toolCalls"].as_u64().unwrap() > 0));
}

#[tokio::test]
async fn replay_on_lossless_counts_the_compactions_it_runs_itself() {
    let report = replay_report(11, 300, "lossless", 3000).await;
    let turns = report["turns"].as_array().unwrap();
    assert_eq!(report["overBudgetTurns"], 0);
    assert!(turns.iter().all(|t| t["engine"] == "lossless"), "{report}");
    // lossless compacts inside afterTurn: the host never runs a compaction for it, and the
    // report must still show them.
    let engine_compactions = turns
        .iter()
        .filter(|t| {
            t["compactions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c == "engine")
        })
        .count();
    assert!(
        engine_compactions > 0,
        "a 300-turn conversation at budget 3000 compacts, and the report must say so"
    );
    assert_eq!(
        report["totalCompactions"].as_u64().unwrap() as usize,
        turns
            .iter()
            .map(|t| t["compactions"].as_array().unwrap().len())
            .sum::<usize>()
    );
}

/// The README's flow: `replay` through lossless into a state dir, then `lcm grep` there finds
/// a detail of the recording's first turn, compacted away long before the end.
#[tokio::test]
async fn lcm_grep_finds_what_a_lossless_replay_stored_in_its_state_dir() {
    let dir = tempfile::tempdir().unwrap();
    let mut messages = clawctx_test_support::messages::conversation(23, 200, 5);
    messages.insert(
        0,
        clawctx_protocol::AgentMessage::user("the invoice job moved to queue zq77 on tuesday"),
    );
    let (recording, state) = recording_and_state(dir.path(), &messages);
    let path = recording.to_str().unwrap();
    let r = clawctx(
        &state,
        &["replay", path, "--engine", "lossless", "--budget", "3000"],
    )
    .await;
    assert_eq!(r.code, 0, "{r}");
    let r = clawctx(&state, &["lcm", "grep", "zq77", "--json"]).await;
    assert_eq!(r.code, 0, "{r}");
    let hits = json_of(&r);
    assert!(
        hits.to_string().contains("queue zq77 on tuesday"),
        "lcm grep in the replay's state dir must find the first turn's detail:\n{r}"
    );
}
