//! `clawctx gateway` starts without a model (issue #28 item 2): a bridge user's model is
//! OpenClaw's, and the engine API needs none. The engine API answers (info, ingest, assemble);
//! chat completions answer a clear 503 naming the keys to set, before anything is stored;
//! `/v1/models` lists none. A failing test prints the gateway's stderr.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::Command;

#[tokio::test]
async fn the_gateway_serves_the_engine_api_without_a_model_and_chat_answers_503() {
    let state = tempfile::tempdir().unwrap();
    std::fs::write(
        state.path().join("clawctx.json"),
        json!({"plugins": {"slots": {"contextEngine": "lossless"}}}).to_string(),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_clawctx"))
        .args(["gateway", "--port", "0"])
        .env("CLAWCTX_STATE_DIR", state.path())
        .env_remove("CLAWCTX_GATEWAY_TOKEN")
        .env_remove("CLAWCTX_GATEWAY_PORT")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_MODEL")
        .env_remove("OPENAI_API_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    let read = tokio::time::timeout(Duration::from_secs(120), stdout.read_line(&mut first)).await;
    if !matches!(read, Ok(Ok(n)) if n > 0) {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), e.read_to_string(&mut err)).await;
        }
        panic!("the gateway did not start without a model\n--- stderr\n{err}");
    }
    assert!(
        first.contains("model none"),
        "the start line says there is no model: {first}"
    );
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {first:?}"))
        .to_owned();
    let http = reqwest::Client::new();

    let info: Value = http
        .get(format!("{url}/v1/engine/info"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(info["info"]["id"], "lossless", "{info:#}");
    let key = "agent:main:bridge";
    let r = http
        .post(format!("{url}/v1/engine/ingest"))
        .json(&json!({"sessionId": "s1", "sessionKey": key,
            "message": {"role": "user", "content": "the walrus is named Ferdinand", "timestamp": 1}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let assembled: Value = http
        .post(format!("{url}/v1/engine/assemble"))
        .json(&json!({"sessionId": "s1", "sessionKey": key, "messages": [], "tokenBudget": 4000}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        assembled.to_string().contains("Ferdinand"),
        "the engine API works without a model: {assembled:#}"
    );

    let r = http
        .post(format!("{url}/v1/chat/completions"))
        .json(&json!({"messages": [{"role": "user", "content": "hello"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let body: Value = r.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("no model is configured")
            && message.contains("agents.defaults.model.primary"),
        "the 503 says what is missing and which key to set: {body:#}"
    );
    assert_eq!(body["error"]["code"], "model_not_configured", "{body:#}");

    let models: Value = http
        .get(format!("{url}/v1/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"], json!([]), "{models:#}");
    let sessions: Value = http
        .get(format!("{url}/v1/sessions"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        !sessions.to_string().contains("hello"),
        "the refused chat stored nothing: {sessions:#}"
    );
    child.start_kill().unwrap();
    let _ = child.wait().await;
}
