//! The model provider's API key and the gateway's token appear in nothing a run produces: a
//! gateway at debug log level serving turns, failed turns, refused requests, its dashboard,
//! metrics and OpenAPI document, `doctor` and `doctor --json`, and the files it leaves in the
//! state dir (transcripts, sessions, the lossless store, the lock and mirror files) all are
//! searched for both. (`pg_secrets.rs` does the same for a database password.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::Command;
use wiremock::matchers::{body_string_contains, header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const API_KEY: &str = "sk-live-7c1d9e2fa4b8";
const TOKEN: &str = "gw-token-3e5a71c09d";

fn write_config(state: &Path, server: &MockServer) {
    let config = json!({
        "models": {"providers": {"mock": {
            "api": "openai-completions", "baseUrl": format!("{}/v1", server.uri()), "apiKeyEnv": "MOCK_API_KEY",
            "models": [{"id": "test-model", "contextWindow": 8000, "maxTokens": 256}], "maxRetries": 0
        }}},
        "agents": {"defaults": {"model": {"primary": "mock/test-model"}}},
        "gateway": {"auth": {"token": TOKEN}},
        "plugins": {"slots": {"contextEngine": "lossless"}}
    });
    std::fs::write(state.join("clawctx.json"), config.to_string()).unwrap();
}

fn assert_clean(what: &str, text: &str) {
    assert!(
        !text.contains(API_KEY),
        "{what} shows the provider's API key:\n{text}"
    );
    assert!(
        !text.contains(TOKEN),
        "{what} shows the gateway token:\n{text}"
    );
}

async fn cli(state: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_clawctx"))
        .arg("--state-dir")
        .arg(state)
        .args(args)
        .env("CLAWCTX_LOG", "debug")
        .env("MOCK_API_KEY", API_KEY)
        .env_remove("OPENAI_API_KEY")
        .env_remove("CLAWCTX_GATEWAY_TOKEN")
        .output()
        .await
        .unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Every file under `dir` but the config (which holds the token by the operator's choice).
fn files_under(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let p = entry.path();
        if p.is_dir() {
            files_under(&p, out);
        } else if p.file_name().is_some_and(|n| n != "clawctx.json") {
            out.push(p);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_key_and_the_gateway_token_are_in_no_output() {
    let server = MockServer::start().await;
    // A failing provider whose error body is long and detailed.
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(body_string_contains("please fail"))
        .respond_with(ResponseTemplate::new(500).set_body_json(
            json!({"error": {"message": "upstream exploded", "type": "server_error"}}),
        ))
        .with_priority(1)
        .mount(&server)
        .await;
    // The key must be sent to the provider, and only there.
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(header("authorization", format!("Bearer {API_KEY}").as_str()))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "chatcmpl-mock",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "noted"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}
        })))
        .with_priority(2)
        .mount(&server)
        .await;

    let state = tempfile::tempdir().unwrap();
    write_config(state.path(), &server);
    let doctor = cli(state.path(), &["doctor"]).await;
    assert!(doctor.contains("lossless"), "doctor ran:\n{doctor}");
    assert_clean("doctor", &doctor);
    assert_clean(
        "doctor --json",
        &cli(state.path(), &["doctor", "--json"]).await,
    );

    let mut child = Command::new(env!("CARGO_BIN_EXE_clawctx"))
        .args([
            "--state-dir",
            &state.path().display().to_string(),
            "gateway",
            "--port",
            "0",
        ])
        .env("CLAWCTX_LOG", "debug")
        .env("MOCK_API_KEY", API_KEY)
        .env_remove("OPENAI_API_KEY")
        .env_remove("CLAWCTX_GATEWAY_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    tokio::time::timeout(Duration::from_secs(120), stdout.read_line(&mut first))
        .await
        .unwrap()
        .unwrap();
    let base = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {first:?}"))
        .trim_end_matches('/')
        .to_owned();
    // Drain stderr as it comes, so a chatty debug log never blocks the gateway.
    let mut stderr = child.stderr.take().unwrap();
    let stderr_task = tokio::spawn(async move {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s).await;
        s
    });

    let http = reqwest::Client::new();
    let mut seen = String::new();
    let turn = |prompt: &str, token: Option<&str>| {
        let mut r = http
            .post(format!("{base}/v1/chat/completions"))
            .header("x-clawctx-session", "agent:main:secrets")
            .json(&json!({"messages": [{"role": "user", "content": prompt}]}));
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r.send()
    };
    let ok = turn("hello there", Some(TOKEN)).await.unwrap();
    assert_eq!(
        ok.status(),
        200,
        "a turn with the token is served (and the key reached the provider)"
    );
    seen.push_str(&ok.text().await.unwrap());
    let failed = turn("please fail now", Some(TOKEN)).await.unwrap();
    assert!(
        failed.status().is_server_error(),
        "the provider's failure is reported: {}",
        failed.status()
    );
    seen.push_str(&failed.text().await.unwrap());
    for token in [None, Some("wrong-token"), Some(&TOKEN[..TOKEN.len() - 1])] {
        let r = turn("hello", token).await.unwrap();
        assert_eq!(r.status(), 401, "token {token:?} is refused");
        seen.push_str(&r.text().await.unwrap());
    }
    let bad = http
        .post(format!("{base}/v1/chat/completions"))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    seen.push_str(&bad.text().await.unwrap());
    for route in [
        "/v1/dashboard/engines",
        "/v1/dashboard/sessions",
        "/v1/dashboard/session?key=agent:main:secrets",
        "/v1/dashboard/transcript?key=agent:main:secrets",
        "/metrics",
        "/openapi.json",
        "/v1/models",
        "/v1/sessions",
        "/v1/engine/info",
    ] {
        let r = http
            .get(format!("{base}{route}"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{route}: {}", r.status());
        seen.push_str(&r.text().await.unwrap());
    }
    let engines: Value = http
        .get(format!("{base}/v1/dashboard/engines"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        engines.to_string().contains("apiKeyEnv"),
        "the config view is there, masked: {engines}"
    );
    assert_clean("the gateway's answers", &seen);

    let pid = child.id().unwrap().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "the gateway stopped cleanly: {status}");
    let mut logs = String::new();
    let _ = stdout.read_to_string(&mut logs).await;
    logs.push_str(&stderr_task.await.unwrap());
    assert!(
        logs.contains("DEBUG") || logs.contains("debug"),
        "the gateway logged at debug level:\n{logs}"
    );
    assert_clean("the gateway's logs", &logs);

    let mut files = Vec::new();
    files_under(state.path(), &mut files);
    assert!(
        files
            .iter()
            .any(|f| f.extension().is_some_and(|e| e == "jsonl")),
        "a transcript was written: {files:?}"
    );
    for f in files {
        let bytes = std::fs::read(&f).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert_clean(&format!("{}", f.display()), &text);
    }
}
