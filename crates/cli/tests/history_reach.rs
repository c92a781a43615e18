//! Issue #15 item 1 as a user meets it: a Node plugin installed with `-l` gets, in `assemble`,
//! every message of a long stored session (contract §7.5: the host prepares the history, the
//! engine decides what fits), however far over the budget it is. The plugin reports what it
//! saw through its `systemPromptAddition`, which the mock OpenAI server on loopback receives.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::clawctx;
use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// A plugin in OpenClaw's shape that keeps the last ten messages and says how many it got.
fn write_counting_plugin(dir: &std::path::Path) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("openclaw.plugin.json"),
        json!({"id": "counting", "kind": "context-engine", "entry": "./index.js", "configSchema": {"type": "object"}}).to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.join("package.json"),
        json!({"name": "counting", "type": "module"}).to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.join("index.js"),
        r#"export default function register(api) {
  api.registerContextEngine("counting", () => ({
    info: { id: "counting", name: "Counting", ownsCompaction: true },
    async ingest() { return { ingested: false }; },
    async assemble({ messages }) {
      return {
        messages: messages.slice(-10),
        estimatedTokens: 0,
        systemPromptAddition: `assemble saw ${messages.length} messages`,
      };
    },
    async compact() { return { ok: true, compacted: false }; },
  }));
}
"#,
    )
    .unwrap();
}

#[tokio::test]
async fn a_node_plugin_sees_every_message_of_a_long_stored_session() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 1, "total_tokens": 21}
        })))
        .mount(&server)
        .await;
    let state = tempfile::tempdir().unwrap();
    std::fs::write(
        state.path().join("clawctx.json"),
        json!({
            "models": {"providers": {"mock": {"api": "openai-completions", "baseUrl": format!("{}/v1", server.uri()),
                "models": [{"id": "m", "contextWindow": 16000, "maxTokens": 512}], "maxRetries": 0}}},
            "agents": {"defaults": {"model": {"primary": "mock/m"}}}
        })
        .to_string(),
    )
    .unwrap();

    // A stored session of 127 messages (about 22k tokens: far over the 16k window), written by
    // the workload generator as an OpenClaw session file and registered as agent:main:main.
    let sessions = state.path().join("agents/main/sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    let recording = sessions.join("stored.jsonl");
    let (code, out, err) = clawctx(
        state.path(),
        &[
            "bench",
            "generate",
            "--kind",
            "chat",
            "--messages",
            "127",
            "--seed",
            "3",
            "-o",
            recording.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let header: Value = serde_json::from_str(
        std::fs::read_to_string(&recording)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    let session_id = header["id"].as_str().unwrap().to_owned();
    std::fs::rename(&recording, sessions.join(format!("{session_id}.jsonl"))).unwrap();
    std::fs::write(
        sessions.join("sessions.json"),
        json!({"agent:main:main": {"sessionId": session_id, "updatedAt": 1}}).to_string(),
    )
    .unwrap();

    let plugin = state.path().join("counting-plugin");
    write_counting_plugin(&plugin);
    let (code, out, err) = clawctx(
        state.path(),
        &["plugins", "install", "-l", plugin.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let (code, out, err) = clawctx(state.path(), &["run", "what did we decide?", "--json"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["engine"], "counting", "the plugin is in charge: {v:#}");

    let requests = server.received_requests().await.unwrap();
    let body: Value = serde_json::from_slice(&requests.last().unwrap().body).unwrap();
    let system = body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        system.contains("assemble saw 127 messages"),
        "§7.5: the plugin's assemble gets all 127 stored messages, not a budget cut (its report: {system:?})"
    );
}
