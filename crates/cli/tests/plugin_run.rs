//! Issue "plugins" done-means, as a user runs it: a Node plugin installed with `-l` answers
//! `clawctx run` against a real OpenAI-compatible server on loopback; a plugin whose process
//! dies in the middle of the run is quarantined and the reply still arrives, from `legacy`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::clawctx;
use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

#[tokio::test]
async fn run_answers_through_a_plugin_and_survives_its_crash() {
    assert!(
        Command::new("node")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "node is required"
    );
    let server = MockServer::start().await;
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
            "models": [{"id": "m", "contextWindow": 16000, "maxTokens": 512}], "maxRetries": 0}}},
        "agents": {"defaults": {"model": {"primary": "mock/m"}}}
    });
    std::fs::write(dir.path().join("clawctx.json"), config.to_string()).unwrap();

    let seed = repo("examples/plugins/seed-node-engine");
    let (code, out, err) = clawctx(
        dir.path(),
        &["plugins", "install", "-l", seed.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let (code, out, err) = clawctx(dir.path(), &["run", "ping", "--json"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["reply"], "Pong from the mock.");
    assert_eq!(v["engine"], "my-engine", "the plugin is in charge: {v:#}");
    assert!(v["quarantines"].as_array().unwrap().is_empty(), "{v:#}");

    // A plugin that exits in the middle of assemble.
    clawctx(
        dir.path(),
        &[
            "config",
            "set",
            "plugins.entries.faulty.config.mode",
            "crash-mid-call",
        ],
    );
    let faulty = repo("crates/plugin/tests/fixtures/node-faulty");
    let (code, out, err) = clawctx(
        dir.path(),
        &["plugins", "install", "-l", faulty.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let (code, out, err) = clawctx(dir.path(), &["run", "ping again", "--json"]);
    assert_eq!(code, 0, "the reply must still arrive:\n{out}\n{err}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["reply"], "Pong from the mock.");
    let q = &v["quarantines"][0];
    assert_eq!(q["engineId"], "faulty", "{v:#}");
    assert_eq!(q["operation"], "assemble", "{v:#}");
    assert!(q["reason"].as_str().unwrap().contains("exited"), "{v:#}");
    assert!(
        err.contains(
            "[context-engine] Context engine \"faulty\" owner=plugin:faulty failed during assemble"
        ),
        "{err}"
    );

    // The transcript of both turns is intact.
    let (code, out, _) = clawctx(dir.path(), &["sessions", "show", "agent:main:main"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("ping again") && out.matches("Pong from the mock.").count() >= 2,
        "{out}"
    );
}

/// The mock model: every request answered with `reply`.
async fn mock_model(reply: &str) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 4, "total_tokens": 24}
        })))
        .mount(&server)
        .await;
    server
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn json_out(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// Doctor's quarantine entries for `engine`.
fn doctor_entries(doctor: &Value, engine: &str) -> Vec<Value> {
    doctor["quarantines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|q| q["engineId"] == engine)
        .cloned()
        .collect()
}

/// Issue #16 item 7 (contract §4.4): a plugin quarantined during `clawctx run` is shown by a
/// later `clawctx doctor` (operation, reason, time, the process and that it exited), from the
/// persisted mirror. The mirror is for visibility only: the next run tries the plugin again,
/// and when it attaches the mirror the finished process's row goes (a running process's row
/// stays); a healthy run leaves no quarantine behind. A corrupt mirror is reported by doctor
/// with its path and never breaks a run.
#[tokio::test]
async fn a_quarantine_of_run_is_visible_to_doctor_until_the_next_run() {
    let server = mock_model("Pong from the mock.").await;
    let dir = tempfile::tempdir().unwrap();
    let config = json!({
        "models": {"providers": {"mock": {"api": "openai-completions", "baseUrl": format!("{}/v1", server.uri()),
            "models": [{"id": "m", "contextWindow": 16000, "maxTokens": 512}], "maxRetries": 0}}},
        "agents": {"defaults": {"model": {"primary": "mock/m"}}},
        "plugins": {"entries": {"faulty": {"config": {"mode": "throws"}}}}
    });
    std::fs::write(dir.path().join("clawctx.json"), config.to_string()).unwrap();
    let faulty = repo("crates/plugin/tests/fixtures/node-faulty");
    let (code, out, err) = clawctx(
        dir.path(),
        &["plugins", "install", "-l", faulty.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let mirror = dir.path().join("runtime/context-engine-quarantines.json");

    // A doctor before any run: nothing quarantined, no mirror, and looking creates none.
    let (code, out, err) = clawctx(dir.path(), &["doctor", "--json"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let doctor = json_out(&out);
    assert!(doctor_entries(&doctor, "faulty").is_empty(), "{doctor:#}");
    assert_eq!(doctor["quarantineMirror"]["exists"], false, "{doctor:#}");
    assert!(!mirror.exists());

    // The run: assemble throws, legacy answers, the quarantine is mirrored.
    let before = now_ms();
    let (code, out, err) = clawctx(dir.path(), &["run", "ping", "--json"]);
    let after = now_ms();
    assert_eq!(code, 0, "{out}\n{err}");
    let run = json_out(&out);
    assert_eq!(run["reply"], "Pong from the mock.");
    assert_eq!(run["quarantines"][0]["operation"], "assemble", "{run:#}");
    assert!(mirror.exists(), "the run wrote the mirror");

    let (code, out, err) = clawctx(dir.path(), &["doctor", "--json"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let doctor = json_out(&out);
    assert_eq!(doctor["status"], "warning", "{doctor:#}");
    let q = doctor_entries(&doctor, "faulty");
    assert_eq!(q.len(), 1, "{doctor:#}");
    let q = &q[0];
    assert_eq!(q["operation"], "assemble", "{q:#}");
    assert_eq!(q["owner"], "plugin:faulty", "{q:#}");
    assert!(
        q["reason"]
            .as_str()
            .unwrap()
            .contains("assemble exploded: the memory store is locked"),
        "{q:#}"
    );
    let failed_at = q["failedAt"].as_u64().unwrap();
    assert!(
        (before..=after).contains(&failed_at),
        "{before} <= {failed_at} <= {after}"
    );
    assert_eq!(q["source"], "mirror", "{q:#}");
    assert_eq!(q["processRunning"], false, "the run has exited: {q:#}");
    let first_pid = q["processId"].as_u64().unwrap();
    assert_eq!(
        doctor["quarantineMirror"],
        json!({"path": mirror, "exists": true, "problem": null})
    );
    let (_, text, _) = clawctx(dir.path(), &["doctor"]);
    assert!(
        text.contains("\"faulty\" (owner plugin:faulty) failed during assemble: ")
            && text.contains(&format!("(in process {first_pid} (exited), ")),
        "{text}"
    );

    // A running process's row (this test, as far as the mirror can tell) survives the next run.
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let start: u64 = stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .nth(19)
        .unwrap()
        .parse()
        .unwrap();
    let mut file: Value = serde_json::from_str(&std::fs::read_to_string(&mirror).unwrap()).unwrap();
    file["quarantines"].as_array_mut().unwrap().push(json!({
        "engineId": "sibling-engine", "operation": "factory", "reason": "sibling failed",
        "failedAtMs": 1, "processId": std::process::id(), "processToken": "test",
        "processStartTime": start
    }));
    std::fs::write(&mirror, file.to_string()).unwrap();

    // Visibility only: the next run tries the plugin again (and quarantines it again); the
    // exited run's row is replaced by its own.
    let (code, out, err) = clawctx(dir.path(), &["run", "ping again", "--json"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(
        json_out(&out)["quarantines"][0]["engineId"],
        "faulty",
        "tried again: {out}"
    );
    let (_, out, _) = clawctx(dir.path(), &["doctor", "--json"]);
    let doctor = json_out(&out);
    let q = doctor_entries(&doctor, "faulty");
    assert_eq!(q.len(), 1, "{doctor:#}");
    assert!(q[0]["failedAt"].as_u64().unwrap() > failed_at, "{q:#?}");
    assert_ne!(q[0]["processId"].as_u64().unwrap(), first_pid);
    let sibling = doctor_entries(&doctor, "sibling-engine");
    assert_eq!(
        sibling.len(),
        1,
        "a running process's row stays: {doctor:#}"
    );
    assert_eq!(sibling[0]["processRunning"], true);
    assert_eq!(sibling[0]["processId"], std::process::id());

    // Fixed: the next run attaches the mirror (the exited run's row goes) and quarantines nothing.
    let (code, _, err) = clawctx(
        dir.path(),
        &[
            "config",
            "set",
            "plugins.entries.faulty.config.mode",
            "healthy",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = clawctx(dir.path(), &["run", "healthy now", "--json"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let run = json_out(&out);
    assert_eq!(run["engine"], "faulty", "{run:#}");
    assert!(run["quarantines"].as_array().unwrap().is_empty(), "{run:#}");
    let (_, out, _) = clawctx(dir.path(), &["doctor", "--json"]);
    let doctor = json_out(&out);
    assert!(doctor_entries(&doctor, "faulty").is_empty(), "{doctor:#}");
    assert_eq!(
        doctor_entries(&doctor, "sibling-engine").len(),
        1,
        "{doctor:#}"
    );

    // A corrupt mirror: doctor names it, a run still answers and leaves it as it is.
    std::fs::write(&mirror, "{\"version\": 1, \"quarantines\": [").unwrap();
    let (code, out, err) = clawctx(dir.path(), &["doctor", "--json"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let doctor = json_out(&out);
    assert_eq!(doctor["status"], "warning", "{doctor:#}");
    assert_eq!(doctor["quarantineMirror"]["path"], json!(mirror));
    assert!(
        doctor["quarantineMirror"]["problem"]
            .as_str()
            .is_some_and(|p| p.contains("not a valid quarantine mirror")),
        "{doctor:#}"
    );
    let (_, text, _) = clawctx(dir.path(), &["doctor"]);
    assert!(
        text.contains(&format!("mirror {}", mirror.display())),
        "{text}"
    );
    let (code, out, err) = clawctx(dir.path(), &["run", "still there?", "--json"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(json_out(&out)["reply"], "Pong from the mock.");
    assert!(err.contains(&mirror.display().to_string()), "{err}");
    assert_eq!(
        std::fs::read_to_string(&mirror).unwrap(),
        "{\"version\": 1, \"quarantines\": ["
    );
}

/// The memories the `node-memories` fixture recalls with `facts` facts (the same text).
fn memories(facts: usize) -> String {
    let lines: Vec<String> = (0..facts)
        .map(|i| format!("fact {i}: the deploy key for region {i} lives in vault/ops/{i}."))
        .collect();
    format!("Recalled memories:\n{}", lines.join("\n"))
}

/// Issue #16 item 4: a real Node plugin written for OpenClaw returns its recalled memories
/// first as a `system` message on every assemble. No quarantine: the model request's system
/// prompt carries the memories, what is sent fits the prompt budget with them counted (the
/// history grows past what fits next to them), and the operator is warned once over the
/// turns, not once per turn.
#[tokio::test]
async fn a_plugin_returning_system_messages_is_folded_not_quarantined() {
    use clawctx_engine::ContextEngineRegistry;
    use clawctx_runtime::{AgentRuntime, TurnRequest};

    let server = mock_model("Noted.").await;
    let dir = tempfile::tempdir().unwrap();
    let facts = 60;
    let config = json!({
        "models": {"providers": {"mock": {"api": "openai-completions", "baseUrl": format!("{}/v1", server.uri()),
            "models": [{"id": "m", "contextWindow": 64000, "maxTokens": 512}], "maxRetries": 0}}},
        "plugins": {"slots": {"contextEngine": "memories"},
                    "entries": {"memories": {"enabled": true, "config": {"facts": facts}}}}
    });
    let registry = std::sync::Arc::new(ContextEngineRegistry::with_legacy());
    let _plugin = clawctx_plugin::register_plugin(
        &registry,
        &repo("crates/cli/tests/fixtures/node-memories"),
        &config,
        clawctx_plugin::PluginOptions {
            runtime_dir: Some(dir.path().join("runtime")),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let resolved = registry
        .resolve(Some(std::sync::Arc::new(config.clone())), None, None)
        .await
        .unwrap();
    let backend = clawctx_runtime::select_backend(&config, Some("mock/m"), &|_| None).unwrap();
    let base = clawctx_runtime::runtime::DEFAULT_SYSTEM_PROMPT.trim();
    let memory_tokens = clawctx_tokens::text_tokens(&memories(facts));
    // Room for the system prompt, the memories and 700 tokens of messages.
    let budget = clawctx_tokens::text_tokens(base) + memory_tokens + 700;
    let rt = AgentRuntime::builder(dir.path(), resolved.engine, backend)
        .prompt_budget(Some(budget))
        .build();

    let (_guard, logs) = clawctx_test_support::logs::capture_tracing();
    let mut outcomes = Vec::new();
    for i in 0..5 {
        let prompt =
            format!("question {i}: ") + &"please look into the deployment logs again ".repeat(50);
        outcomes.push(
            rt.run_turn(TurnRequest::new("agent:main:main", prompt))
                .await
                .unwrap(),
        );
    }
    rt.shutdown().await;

    assert!(
        registry.quarantines().is_empty(),
        "{:?}",
        registry.quarantines()
    );
    let bodies: Vec<Value> = server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    assert_eq!(bodies.len(), 5);
    for (i, (body, outcome)) in bodies.iter().zip(&outcomes).enumerate() {
        assert_eq!(outcome.engine, "memories", "turn {i}: no quarantine");
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages[0]["role"], "system", "turn {i}");
        let system = messages[0]["content"].as_str().unwrap();
        assert!(
            system.starts_with(&memories(facts)) && system.ends_with(base),
            "turn {i}: the memories lead the system prompt: {system}"
        );
        assert!(
            messages[1..].iter().all(|m| m["role"] != "system"
                && !m["content"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("vault/ops")),
            "turn {i}: one system message, the memories only in it"
        );
        let sent = clawctx_tokens::text_tokens(system) + outcome.prompt_tokens[0];
        assert!(
            sent <= budget,
            "turn {i}: {sent} tokens sent, over the budget of {budget}"
        );
    }
    assert!(
        outcomes[4].context_tokens_before > 700,
        "the history outgrew the room next to the memories: {}",
        outcomes[4].context_tokens_before
    );
    let warned: Vec<usize> = outcomes
        .iter()
        .map(|o| {
            o.warnings
                .iter()
                .filter(|w| w.contains("system-role message"))
                .count()
        })
        .collect();
    assert_eq!(warned, [1, 0, 0, 0, 0]);
    let logged = logs
        .warnings()
        .into_iter()
        .filter(|w| w.contains("\"memories\" returned 1 system-role message"))
        .count();
    assert_eq!(logged, 1, "{:?}", logs.warnings());
}
