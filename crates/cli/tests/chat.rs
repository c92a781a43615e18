//! `clawctx chat` driven through its stdin, against a real OpenAI-compatible server on
//! loopback: streamed replies, `/status`, `/compact`, `/new`, `/quit`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::json;
use wiremock::matchers::{body_partial_json, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

#[tokio::test]
async fn chat_streams_and_handles_slash_commands() {
    let server = MockServer::start().await;
    let sse = concat!(
        "data: {\"choices\": [{\"index\": 0, \"delta\": {\"content\": \"Streamed \"}}]}\n\n",
        "data: {\"choices\": [{\"index\": 0, \"delta\": {\"content\": \"answer.\"}}]}\n\n",
        "data: {\"choices\": [{\"index\": 0, \"delta\": {}, \"finish_reason\": \"stop\"}]}\n\n",
        "data: [DONE]\n\n"
    );
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(body_partial_json(json!({"stream": true})))
        .respond_with(ResponseTemplate::new(200).set_body_raw(sse, "text/event-stream"))
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let config = json!({
        "models": {"providers": {"mock": {"api": "openai-completions", "baseUrl": format!("{}/v1", server.uri()),
            "models": [{"id": "m", "contextWindow": 16000, "maxTokens": 512}], "maxRetries": 0}}},
        "agents": {"defaults": {"model": {"primary": "mock/m"}}}
    });
    std::fs::write(dir.path().join("clawctx.json"), config.to_string()).unwrap();

    let mut child = Command::new(env!("CARGO_BIN_EXE_clawctx"))
        .args(["chat", "--session", "agent:main:chat-test"])
        .env("CLAWCTX_STATE_DIR", dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut stdin = child.stdin.take().unwrap();
        for line in [
            "hello there",
            "second question",
            "/status",
            "/compact keep the questions",
            "/new",
            "/status",
            "/quit",
        ] {
            writeln!(stdin, "{line}").unwrap();
        }
    }
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{stderr}",
        out.status
    );
    assert_eq!(
        stdout.matches("Streamed answer.").count(),
        2,
        "two streamed replies:\n{stdout}"
    );
    assert!(
        stdout.contains("legacy"),
        "/status names the engine in charge:\n{stdout}"
    );
    let bodies: Vec<serde_json::Value> = server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    let (turns, others): (Vec<_>, Vec<_>) = bodies.iter().partition(|b| b["stream"] == true);
    assert_eq!(
        turns.len(),
        2,
        "slash commands never reach the model as turns"
    );
    assert!(
        others
            .iter()
            .all(|b| b["messages"].to_string().contains("<conversation>")),
        "the only other requests are /compact's summary requests (the agent's model summarizes): {others:#?}"
    );
    let texts = turns[1]["messages"].to_string();
    assert!(
        texts.contains("hello there") && texts.contains("second question"),
        "history is sent: {texts}"
    );
}
